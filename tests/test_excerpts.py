"""Word times (`las align`, CTM) and training draws of single words cut at them
(`train.augment.words`), as isolated words arrive."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest
import torch

from las.core.config import load_config
from las.core.errors import LasError
from las.core.text import Vocabulary
from las.data.augmentation.word_excerpts import MARGIN_SECONDS, WordExcerpts, alignment_path, missing_word_times
from las.data.cache.extraction import content_digest
from las.data.corpora.ctm import WordTime, read_ctm, read_digests, write_ctm
from las.data.corpora.manifest import read_utterances
from las.data.dataset import Draw, SpeechDataset

from .conftest import AN4, TINY, an4_rows, assert_clear_error, run, write_manifest

WORDS = [WordTime("G", 0.34, 0.6), WordTime("TWO", 0.6, 0.89), WordTime("EIGHTY", 1.0, 1.2)]


def test_ctm_round_trips_and_keeps_each_utterances_words_in_time_order(tmp_path: Path) -> None:
    text = io.StringIO()
    write_ctm([("a", WORDS), ("b", WORDS[:1])], text)
    lines = text.getvalue().splitlines()
    assert lines[0] == "a 1 0.340 0.260 G"
    path = tmp_path / "words.ctm"
    # Tools write CTM with a confidence, comments, and not always sorted.
    path.write_text(";; made by hand\n" + "\n".join(reversed(lines)) + "\nb 1 2.0 0.5 X 0.93\n")
    found = read_ctm(path)
    assert [word.word for word in found["a"]] == ["G", "TWO", "EIGHTY"]
    assert all(abs(got.end - want.end) < 1e-9 for got, want in zip(found["a"], WORDS, strict=True))
    assert [word.word for word in found["b"]] == ["G", "X"]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("a 1 0.3 G", "expected 'utterance channel start duration word'"),
        ("a 1 soon 0.2 G", "are not seconds"),
        ("a 1 0.3 -0.2 G", "finite and not negative"),
        ("a 1 nan 0.2 G", "finite and not negative"),
    ],
)
def test_a_bad_ctm_line_is_one_clear_error_naming_it(tmp_path: Path, line: str, message: str) -> None:
    path = tmp_path / "words.ctm"
    path.write_text(f"a 1 0.1 0.2 X\n{line}\n")
    with pytest.raises(LasError, match=rf"words.ctm:2: .*{message}"):
        read_ctm(path)


def excerpts(share: float, word_times: list[list[WordTime]]) -> WordExcerpts:
    return WordExcerpts(share, 0.01, word_times)


def test_a_draw_is_one_whole_word_with_at_most_the_margin_and_none_of_its_neighbours() -> None:
    words = excerpts(1.0, [WORDS])
    seen = set()
    for seed in range(300):
        excerpt = words.draw(0, 1.0, 150, torch.Generator().manual_seed(seed))
        assert excerpt is not None
        word = next(item for item in WORDS if item.word == excerpt.text)
        index = WORDS.index(word)
        earliest = max(word.start - MARGIN_SECONDS, WORDS[index - 1].end if index else 0.0)
        latest = min(word.end + MARGIN_SECONDS, WORDS[index + 1].start if index + 1 < len(WORDS) else 1.5)
        assert round(earliest * 100) <= excerpt.start <= round(word.start * 100)
        assert round(word.end * 100) <= excerpt.end <= round(latest * 100)
        seen.add(excerpt.text)
    assert seen == {"G", "TWO", "EIGHTY"}
    # At speed 1.1 the recording is 1.1 times shorter: so are the word's frames.
    fast = words.draw(0, 1.1, 150, torch.Generator().manual_seed(0))
    slow = words.draw(0, 1.0, 150, torch.Generator().manual_seed(0))
    assert fast is not None and slow is not None and fast.text == slow.text
    assert abs(fast.start * 1.1 - slow.start) <= 1.5 and abs(fast.end * 1.1 - slow.end) <= 1.5


def test_words_are_drawn_at_their_share_reproducibly_and_never_from_one_word_utterances() -> None:
    words = excerpts(0.25, [WORDS, WORDS[:1], []])
    draws = [words.draw(0, 1.0, 150, torch.Generator().manual_seed(seed)) for seed in range(800)]
    assert draws == [words.draw(0, 1.0, 150, torch.Generator().manual_seed(seed)) for seed in range(800)]
    assert 0.2 < sum(draw is not None for draw in draws) / len(draws) < 0.3
    for index in (1, 2):  # already a single word; no word times
        assert all(words.draw(index, 1.0, 150, torch.Generator().manual_seed(seed)) is None for seed in range(50))


def test_a_tight_draw_is_every_word_from_the_first_ones_start_to_the_last_ones_end() -> None:
    words = WordExcerpts(0.0, 0.01, [WORDS, WORDS[:1], []], tight=1.0)
    for seed in range(100):
        excerpt = words.draw(0, 1.0, 150, torch.Generator().manual_seed(seed))
        assert excerpt is not None and excerpt.text == "G TWO EIGHTY"
        assert round(max(0.0, WORDS[0].start - MARGIN_SECONDS) * 100) <= excerpt.start <= round(WORDS[0].start * 100)
        assert round(WORDS[-1].end * 100) <= excerpt.end <= round((WORDS[-1].end + MARGIN_SECONDS) * 100)
        alone = words.draw(1, 1.0, 150, torch.Generator().manual_seed(seed))  # a one-word utterance too
        assert alone is not None and alone.text == "G"
        assert words.draw(2, 1.0, 150, torch.Generator().manual_seed(seed)) is None  # no word times
    # Its share comes after the single words' in the one draw: with tight 0 nothing changes.
    both = WordExcerpts(0.25, 0.01, [WORDS], tight=0.25)
    draws = [both.draw(0, 1.0, 150, torch.Generator().manual_seed(seed)) for seed in range(800)]
    single = [excerpts(0.25, [WORDS]).draw(0, 1.0, 150, torch.Generator().manual_seed(seed)) for seed in range(800)]
    assert all(draw == alone for draw, alone in zip(draws, single, strict=True) if alone is not None)
    whole = sum(draw is not None and draw.text == "G TWO EIGHTY" for draw in draws) / len(draws)
    assert 0.2 < whole < 0.3


def test_a_dataset_draw_is_the_words_frames_and_characters_and_the_same_on_resume() -> None:
    vocabulary = Vocabulary.from_texts(["G TWO EIGHTY"])
    features = torch.randn(150, 4)
    dataset = SpeechDataset(["a"], [features], ["G TWO EIGHTY"], vocabulary, excerpts=excerpts(1.0, [WORDS]))
    example = dataset[Draw(0, 0, 7)]
    excerpt = excerpts(1.0, [WORDS]).draw(0, 1.0, 150, torch.Generator().manual_seed(7))
    assert excerpt is not None and example.text == excerpt.text
    assert vocabulary.decode(example.tokens.tolist()) == excerpt.text
    assert torch.equal(example.features, features[excerpt.start : excerpt.end])
    again = dataset[Draw(0, 0, 7)]
    assert torch.equal(again.features, example.features) and again.text == example.text
    assert dataset[0].text == "G TWO EIGHTY"  # not a training draw: the whole utterance


def test_the_training_manifests_ctm_is_found_beside_it_and_can_be_turned_off(tmp_path: Path) -> None:
    manifest = write_manifest(tmp_path / "train.tsv", an4_rows("train", 2))
    assert alignment_path(str(manifest), "auto") is None
    utterances = [utterance.with_text("G TWO EIGHTY") for utterance in read_utterances(manifest)]
    # None beside it: the single words and tight crops are off, and a run says so and where it looked.
    asked = load_config(None, [*TINY, f"data.train={manifest}"])
    assert WordExcerpts.of(asked, utterances, no_digests) is None
    assert f"no word times beside {manifest} ({tmp_path / 'train.ctm'})" in str(missing_word_times(asked))
    off = load_config(None, [*TINY, f"data.train={manifest}", "train.augment.words=0", "train.augment.tight=0"])
    assert missing_word_times(off) is None  # not asked for: nothing to say
    (tmp_path / "train.ctm").write_text("")
    assert alignment_path(str(manifest), "auto") == tmp_path / "train.ctm"
    assert alignment_path(str(manifest), "") is None
    assert alignment_path(str(AN4 / "train.tsv"), "auto") == AN4 / "train.ctm"
    config = load_config(None, [*TINY, f"data.train={manifest}", "train.augment.words=0.3"])
    assert WordExcerpts.of(config, utterances, no_digests) is None  # an empty CTM: off with a warning
    with (tmp_path / "train.ctm").open("w") as stream:
        write_ctm([(utterances[0].id, WORDS)], stream)
    found = WordExcerpts.of(config, utterances, no_digests)
    assert found is not None and found.share == 0.3 and found.word_times == [WORDS, []]
    assert missing_word_times(config) is None


def no_digests() -> list[str]:
    raise AssertionError("a CTM without digests needs none")


def test_stale_word_times_are_not_used(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Word times of a transcript edited since, or of audio that changed since (the digest `las
    align` wrote beside them), would cut the wrong words: those utterances train whole."""
    manifest = write_manifest(tmp_path / "train.tsv", an4_rows("train", 3))
    utterances = [utterance.with_text("G TWO EIGHTY") for utterance in read_utterances(manifest)]
    utterances[1] = utterances[1].with_text("G TOO EIGHTY")  # edited since
    digests = [content_digest(utterance) for utterance in utterances]
    aligned_on = {utterances[0].id: digests[0], utterances[1].id: digests[1], utterances[2].id: "0" * 64}
    with (tmp_path / "train.ctm").open("w") as stream:
        write_ctm([(utterance.id, WORDS) for utterance in utterances], stream, aligned_on)
    assert read_digests(tmp_path / "train.ctm") == aligned_on
    config = load_config(None, [*TINY, f"data.train={manifest}", "train.augment.words=0.3"])
    found = WordExcerpts.of(config, utterances, lambda: digests)
    assert found is not None and found.word_times == [WORDS, [], []]
    assert "word times of 2 training utterances are stale" in capsys.readouterr().err


def test_las_align_writes_the_transcripts_words_in_order_within_each_utterance(
    trained_run: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "train.ctm"
    code, _, stderr = run("align", trained_run["run"] / "best.pt", trained_run["train"], "--out", out)
    assert code == 0, stderr
    rows = an4_rows("train", 4, longest_seconds=1.6)
    found = read_ctm(out)
    assert list(found) == [row[0] for row in rows]
    assert read_digests(out) == {row[0]: hashlib.sha256(Path(row[1]).read_bytes()).hexdigest() for row in rows}
    for identifier, _, duration, text in rows:
        words = found[identifier]
        assert " ".join(word.word for word in words) == text
        assert all(0 <= word.start < word.end <= float(duration) + 0.011 for word in words)
        assert all(first.end <= second.start + 1e-6 for first, second in zip(words, words[1:], strict=False))


def test_las_align_of_data_without_transcripts_is_one_clear_error(trained_run: dict[str, Path]) -> None:
    code, _, stderr = run("align", trained_run["run"] / "best.pt", AN4 / "audio" / "an10-fjmd-b.flac")
    assert_clear_error(code, stderr, "has no transcripts")
