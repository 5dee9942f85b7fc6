import pytest

from las.core.errors import LasError
from las.core.text import SPECIALS, Vocabulary, clean_transcript


def test_vocabulary_has_specials_first_and_sorted_characters() -> None:
    vocabulary = Vocabulary.from_texts(["HELP", "YES NO"])
    assert vocabulary.symbols[: len(SPECIALS)] == SPECIALS
    assert vocabulary.symbols[len(SPECIALS) :] == tuple(sorted(set("HELPYES NO")))
    assert (vocabulary.pad, vocabulary.sos, vocabulary.eos) == (0, 1, 2)


def test_encode_decode_round_trip_stops_at_eos() -> None:
    vocabulary = Vocabulary.from_texts(["HELLO WORLD"])
    ids = vocabulary.encode("HELLO")
    assert vocabulary.decode(ids) == "HELLO"
    assert vocabulary.decode([vocabulary.sos, *ids, vocabulary.eos, *ids]) == "HELLO"


def test_unknown_characters_are_refused() -> None:
    vocabulary = Vocabulary.from_texts(["ABC"])
    assert vocabulary.unknown_characters("ABxD") == {"x", "D"}
    with pytest.raises(LasError, match="not in the vocabulary"):
        vocabulary.encode("AD")


def test_saved_list_round_trip() -> None:
    vocabulary = Vocabulary.from_texts(["A B"])
    assert Vocabulary.from_list(vocabulary.to_list()) == vocabulary
    with pytest.raises(LasError):
        Vocabulary.from_list(["A", "B"])


def test_a_transcript_is_one_spelling_of_what_was_said() -> None:
    """Text from documents and web pages: decomposed accents, no-break spaces, tabs and
    invisible characters give the symbols a typed transcript would; joiners that spell stay."""
    assert clean_transcript("  CAFE\u0301\u00a0\u00a0AU\tLAIT\n") == "CAF\u00c9 AU LAIT"
    assert clean_transcript("\ufeffYES\u200b NO\u00ad") == "YES NO"
    assert clean_transcript("\u200b \u2060") == ""
    assert (
        clean_transcript("\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645")
        == "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"
    )
    assert clean_transcript("HELLO  WORLD ") == "HELLO WORLD"
