"""A closed vocabulary (`decode.lexicon`): every strategy spells only the list's words."""

from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import pytest
import torch

from las.core.config import DecodeConfig
from las.core.errors import LasError
from las.core.text import Vocabulary
from las.model.las import LAS
from las.model.listener import ListenerOutput
from las.search import Rules, build_strategy
from las.search.common import Heard
from las.search.lexicon import ABSENT, AFTER_SPACE, ENDED, START, Lexicon, read_lexicon

from .conftest import transcript_words
from .test_model import VOCABULARY, batch, make_model
from .test_search import trained_batch

WORDS = ["BAD", "BE", "CAFE", "HE"]  # of VOCABULARY's letters A-H
SPACE, EOS = VOCABULARY.index[" "], VOCABULARY.eos


def following(lexicon: Lexicon, prefix: str) -> set[str]:
    """The symbols the tree allows after `prefix`, as text (<eos> as "$")."""
    node = START
    for character in prefix:
        node = int(lexicon.edges[node, VOCABULARY.index[character]])
        assert node != ABSENT, f"{prefix!r} is not a prefix of the lexicon"
    allowed = (lexicon.edges[node] != ABSENT).nonzero().flatten().tolist()
    return {"$" if symbol == EOS else VOCABULARY.symbols[symbol] for symbol in allowed}


def test_the_tree_allows_a_word_end_only_where_a_word_ends_and_no_eos_after_a_space() -> None:
    lexicon = Lexicon.of(WORDS, VOCABULARY)
    assert lexicon.words == 4
    assert following(lexicon, "") == {"B", "C", "H", "$"}  # nothing said is a transcript too
    assert following(lexicon, "B") == {"A", "E"}
    assert following(lexicon, "BE") == {" ", "$"}
    assert following(lexicon, "BE ") == {"B", "C", "H"}  # a word must follow a space
    assert following(lexicon, "BE HE ") == {"B", "C", "H"}
    assert following(lexicon, "CAF") == {"E"}
    assert int(lexicon.edges[ENDED, EOS]) == ENDED and (lexicon.edges[ENDED] != ABSENT).sum() == 1
    assert (lexicon.edges[AFTER_SPACE, SPACE], lexicon.edges[AFTER_SPACE, EOS]) == (ABSENT, ABSENT)


def test_words_the_model_cannot_spell_are_left_out_with_a_warning(capsys: pytest.CaptureFixture) -> None:
    lexicon = Lexicon.of(["BAD", "bad", "ZOO", "BAD"], VOCABULARY, "words.txt")
    assert lexicon.words == 1
    assert "words.txt: 2 words use characters the model lacks, left out" in capsys.readouterr().err
    with pytest.raises(LasError, match=r"words.txt: none of its 2 words can be spelled .*'ox': 'ox'"):
        Lexicon.of(["zoo", "ox"], VOCABULARY, "words.txt")


def test_a_word_list_and_a_pronunciation_lexicon_read_the_same(tmp_path: Path) -> None:
    plain, kaldi = tmp_path / "words.txt", tmp_path / "lexicon.txt"
    plain.write_text("BAD\n\nBE\nHE\n")
    kaldi.write_text("BAD b ae d\nBE b iy\n  \nHE hh iy\n")
    assert torch.equal(read_lexicon(plain, VOCABULARY).edges, read_lexicon(kaldi, VOCABULARY).edges)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "decode.lexicon: file not found"),
        (b"\n  \n", "no words"),
        (b"\xff\xfeB\x00", "not UTF-8 text"),
        ("folder", "decode.lexicon: cannot read .*words.txt"),
    ],
)
def test_an_unusable_lexicon_is_one_clear_error(tmp_path: Path, content: bytes | str | None, message: str) -> None:
    path = tmp_path / "words.txt"
    if content == "folder":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(LasError, match=message):
        read_lexicon(path, VOCABULARY)


class Searched(NamedTuple):
    model: LAS
    memory: ListenerOutput
    vocabulary: Vocabulary
    words: list[str]
    trained: bool


@pytest.fixture(scope="module", params=["untrained", "trained"])
def searched(request: pytest.FixtureRequest, trained_run: dict[str, Path]) -> Searched:
    """An untrained model, whose hypotheses run to the length limit unless something stops
    them, with words of its letters; and the briefly trained one on its real utterances, whose
    hypotheses end on their own, with the words of their transcripts but one."""
    if request.param == "untrained":
        model = make_model()
        features, lengths, _, _ = batch()
        return Searched(model, model.listener(features, lengths), VOCABULARY, WORDS, trained=False)
    recognizer, utterances = trained_batch(trained_run)
    model = recognizer.model
    words = sorted(transcript_words(trained_run["train"]))
    memory = model.listener(utterances.features, utterances.feature_lengths)
    return Searched(model, memory, recognizer.vocabulary, words[1:], trained=True)


def spelled(
    searched: Searched, strategy: str, words: list[str], folder: Path, **settings: object
) -> list[list[tuple[str, bool]]]:
    """Every hypothesis of the search with these `words` as its lexicon (none: no lexicon):
    its text, and whether it ended at the length limit."""
    path = folder / "words.txt"
    path.write_text("".join(f"{word}\n" for word in words))
    settings = {"ctc_weight": 0.0, **settings}
    config = replace(DecodeConfig(), strategy=strategy, lexicon=str(path) if words else "", **settings)
    found = build_strategy(config, searched.vocabulary, searched.model).search(searched.model, searched.memory)
    longest = Rules.of(config).limits(Heard.of(searched.model, searched.memory)).longest.tolist()
    return [
        [(searched.vocabulary.decode(hypothesis.tokens), len(hypothesis.tokens) + 1 >= limit) for hypothesis in found]
        for found, limit in zip(found, longest, strict=True)
    ]


@pytest.mark.parametrize(
    ("strategy", "settings"),
    [
        ("greedy", {}),
        ("beam", {"beam_size": 4, "nbest": 4}),
        ("beam", {"beam_size": 4, "nbest": 4, "ctc_weight": 0.5}),
        ("sample", {"samples": 6, "nbest": 6}),
        ("greedy", {"max_length_ratio": 0.1}),  # limits that end hypotheses mid-word
        ("beam", {"beam_size": 3, "nbest": 3, "max_length_ratio": 0.1}),
    ],
)
def test_every_strategy_spells_only_the_lexicons_words(
    searched: Searched, strategy: str, settings: dict, tmp_path: Path
) -> None:
    if settings.get("ctc_weight") and not searched.trained:
        pytest.skip("an untrained CTC head finds most prefixes impossible, and a search ends those where they are")
    words = searched.words
    found = spelled(searched, strategy, words, tmp_path, **settings)
    assert all(found), "every utterance keeps a hypothesis"
    for hypotheses in found:
        for text, at_limit in hypotheses:
            *complete, last = text.split(" ")
            assert all(word in words for word in complete), text
            # Only at the length limit may a hypothesis end in the middle of a word.
            assert last in words or text == "" or at_limit and any(word.startswith(last) for word in words), text
    if searched.trained and "max_length_ratio" not in settings:
        assert not any(hypotheses[0][1] for hypotheses in found), "the best end on their own"
    if not searched.trained:  # left alone, it spells other words: the lexicon kept these in
        unconstrained = spelled(searched, strategy, [], tmp_path, **settings)
        assert any(word not in words for hypotheses in unconstrained for text, _ in hypotheses for word in text.split())


@pytest.mark.parametrize("ctc_weight", [0.0, 0.4])
def test_beam_size_one_with_a_lexicon_equals_greedy_with_it(
    searched: Searched, ctc_weight: float, tmp_path: Path
) -> None:
    greedy = spelled(searched, "greedy", searched.words, tmp_path, ctc_weight=ctc_weight)
    beamed = spelled(searched, "beam", searched.words, tmp_path, beam_size=1, nbest=1, ctc_weight=ctc_weight)
    assert beamed == greedy


def test_ctc_greedy_search_refuses_a_lexicon(tmp_path: Path) -> None:
    (tmp_path / "words.txt").write_text("BAD\n")
    config = replace(DecodeConfig(), strategy="ctc", lexicon=str(tmp_path / "words.txt"))
    with pytest.raises(LasError, match="decode.lexicon .* use decode.strategy=beam, greedy or sample"):
        build_strategy(config, VOCABULARY, make_model("location", "model.ctc_weight=0.3"))


def test_a_vocabulary_without_a_space_spells_one_word() -> None:
    letters = Vocabulary.from_texts(["ABC"])
    lexicon = Lexicon.of(["AB", "C"], letters)
    assert not (lexicon.edges == AFTER_SPACE).any()  # nothing leads past a word to another
