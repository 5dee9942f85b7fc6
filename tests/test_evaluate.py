import io
import json
from pathlib import Path

import pytest

from las.core.errors import LasError
from las.core.metrics import EditCounts, character_error_rate, edit_counts
from las.recognition.evaluate import evaluate_files, format_report, score
from las.recognition.transcripts import Transcript, read_transcripts, write_transcripts

from .conftest import assert_clear_error
from .conftest import run as las


@pytest.mark.parametrize(
    ("hypothesis", "reference", "counts"),
    [
        ("HELLO", "HELLO", EditCounts(0, 0, 0)),
        ("HELLO", "HALLO", EditCounts(1, 0, 0)),
        ("HELO", "HELLO", EditCounts(0, 1, 0)),
        ("HELLLO", "HELLO", EditCounts(0, 0, 1)),
        ("", "ABC", EditCounts(0, 3, 0)),
        ("ABC", "", EditCounts(0, 0, 3)),
        ("XBCD", "ABC", EditCounts(1, 0, 1)),
    ],
)
def test_substitutions_deletions_insertions(hypothesis: str, reference: str, counts: EditCounts) -> None:
    assert edit_counts(hypothesis, reference) == counts


def test_report_figures_on_a_hand_made_case() -> None:
    references = {"a": "TWO FOUR", "b": "YES", "c": "NO"}
    hypotheses = {"a": "TWO FOR", "b": "YES", "c": "NOO"}
    report = score(hypotheses, references)
    assert report.utterances == 3
    assert (report.substitutions, report.deletions, report.insertions) == (0, 1, 1)
    assert report.mean_distance == pytest.approx(2 / 3)
    assert report.cer == pytest.approx(100 * 2 / 13)
    assert report.wer == pytest.approx(100 * 2 / 4)  # FOUR->FOR and NO->NOO
    assert report.sentence_error_rate == pytest.approx(100 * 2 / 3)
    assert [item.id for item in report.worst] == ["a", "c", "b"]
    assert report.cer == pytest.approx(character_error_rate(["TWO FOR", "YES", "NOO"], ["TWO FOUR", "YES", "NO"]))
    text = format_report(report, by_length=True)
    assert "CER                   15.38%" in text
    assert "    REF: TWO FOUR\n    HYP: TWO FO*R\n               D" in text  # aligned, the deletion marked
    assert [(bucket.shortest, bucket.longest, bucket.utterances) for bucket in report.by_length] == [(0, 10, 3)]
    assert "0-10       3 utterances  CER  15.38%" in text


def test_id_mismatches_are_refused_clearly() -> None:
    with pytest.raises(LasError, match=r"1 reference id\(s\) have no hypothesis \(e.g. b\)"):
        score({"a": "X"}, {"a": "X", "b": "Y"})
    with pytest.raises(LasError, match=r"1 hypothesis id\(s\) are not in the reference \(e.g. z\)"):
        score({"a": "X", "z": "Y"}, {"a": "X"})


@pytest.mark.parametrize(
    ("output_format", "suffix"), [("csv", ".csv"), ("csv", ""), ("kaldi", ""), ("kaldi", ".txt"), ("jsonl", ".jsonl")]
)
def test_every_output_format_reads_back(tmp_path: Path, output_format: str, suffix: str) -> None:
    """Also without the suffix of its format: `las decode --out hyp` writes CSV to `hyp`."""
    transcripts = [Transcript("an1", "HELLO WORLD", {"score": -1.5}), Transcript("an2", "A, B", {"score": -2.0})]
    path = tmp_path / f"hyp{suffix}"
    with open(path, "w") as stream:
        write_transcripts(transcripts, output_format, stream)
    assert read_transcripts(path) == {"an1": "HELLO WORLD", "an2": "A, B"}


def test_csv_has_the_kaggle_header_and_jsonl_keeps_scores() -> None:
    stream = io.StringIO()
    write_transcripts([Transcript("an1", "YES")], "csv", stream)
    assert stream.getvalue() == "id,label\nan1,YES\n"
    stream = io.StringIO()
    write_transcripts([Transcript("an1", "YES", {"score": -0.5})], "jsonl", stream)
    assert json.loads(stream.getvalue()) == {"id": "an1", "text": "YES", "score": -0.5}


def test_duplicate_ids_and_bad_lines_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "hyp.csv"
    path.write_text("id,label\na,X\nb,Y\na,Z\n")
    with pytest.raises(LasError, match=r"hyp.csv:4: duplicate id 'a' \(first on line 2\)"):
        read_transcripts(path)
    path.write_text("id,text\na,X\n")
    with pytest.raises(LasError, match="hyp.csv:1: expected a CSV header 'id,label'"):
        read_transcripts(path)
    bad = tmp_path / "hyp.jsonl"
    bad.write_text('{"id": "a", "text": "X"}\nnot json\n')
    with pytest.raises(LasError, match="hyp.jsonl:2: expected a JSON object"):
        read_transcripts(bad)


def test_manifest_as_reference(tmp_path: Path) -> None:
    manifest = tmp_path / "ref.tsv"
    manifest.write_text("id\tpath\tduration_s\ttext\na\ta.flac\t1.0\tYES\n")
    hypothesis = tmp_path / "hyp"
    hypothesis.write_text("a YES\n")
    assert evaluate_files(hypothesis, manifest).cer == 0.0


def test_transcripts_and_references_are_read_as_one_spelling(tmp_path: Path) -> None:
    """A reference pasted from a document (a no-break space, a decomposed accent, a zero-width
    space) scores a hypothesis of the same words as right, and trains the same characters."""
    from las.data.corpora.manifest import read_utterances

    manifest = tmp_path / "ref.tsv"
    audio = Path(__file__).parent.parent / "data" / "an4" / "audio" / "an1-mblw-b.flac"
    manifest.write_text(f"id\tpath\tduration_s\ttext\na\t{audio}\t1.0\tCAFE\u0301\u00a0\u200bAU  LAIT\n")
    hypothesis = tmp_path / "hyp.csv"
    hypothesis.write_text("id,label\na,CAF\u00c9 AU LAIT\n")
    assert evaluate_files(hypothesis, manifest).cer == 0.0
    assert list(read_utterances(manifest).texts) == ["CAF\u00c9 AU LAIT"]
    manifest.write_text(f"id\tpath\tduration_s\ttext\na\t{audio}\t1.0\t\u200b\n")
    with pytest.raises(LasError, match="empty transcript"):
        read_utterances(manifest)


def test_word_errors_list_the_confusions_and_split_unseen_words_from_known_ones(tmp_path: Path) -> None:
    references = {"a": "THE CAT SAT", "b": "A DOG RAN", "c": "THE CAT"}
    hypotheses = {"a": "THE BAT SAT", "b": "DOG RAN FAST", "c": "THE BAT"}
    report = score(hypotheses, references, known={"the", "sat", "dog", "ran"})
    words = report.words
    assert (words.counts.substitutions, words.counts.deletions, words.counts.insertions) == (2, 1, 1)
    assert report.wer == pytest.approx(100 * words.counts.errors / report.reference_words)
    assert words.confusions == [("CAT", "BAT", 2)]
    assert words.deleted == [("A", 1)] and words.inserted == [("FAST", 1)]
    split = words.known_words
    assert split is not None and (split.known, split.known_wrong, split.unknown, split.unknown_wrong) == (5, 0, 3, 3)
    assert split.unknown_share == pytest.approx(37.5)
    assert score(hypotheses, references, commonest=0).words.confusions == []
    # The same through the command line, the training transcripts in any format eval reads.
    for name, texts in (("hyp.txt", hypotheses), ("ref.txt", references)):
        (tmp_path / name).write_text("".join(f"{key} {text}\n" for key, text in texts.items()))
    (tmp_path / "train.txt").write_text("t1 THE DOG SAT\nt2 the dog ran\n")  # a word is held in any case
    code, stdout, stderr = las("eval", tmp_path / "hyp.txt", tmp_path / "ref.txt", "--known", tmp_path / "train.txt")
    assert code == 0, stderr
    assert "WER                   50.00%  (2 sub, 1 del, 1 ins over 8 words)" in stdout
    assert "37.50% of the reference words are not in the training transcripts; wrong: 100.00% of them, 0.00%" in stdout
    assert "confusion pairs (reference -> hypothesis):\n      2  CAT -> BAT" in stdout
    assert "deleted words:\n      1  A" in stdout and "inserted words:\n      1  FAST" in stdout
    for known, message in (("absent.txt", "--known: "), ("empty.txt", "empty.txt: no transcripts in it")):
        (tmp_path / "empty.txt").write_text("")
        code, _, stderr = las("eval", tmp_path / "hyp.txt", tmp_path / "ref.txt", "--known", tmp_path / known)
        assert_clear_error(code, stderr, message)


def test_hypotheses_in_a_case_the_references_never_use_are_refused_or_compared_without_case(tmp_path: Path) -> None:
    """Another recogniser's lower case against upper-case references would score every letter
    wrong: refused in one line naming --ignore-case, which folds both sides; case that the
    references themselves use, or a stray letter, is scored as written."""
    references = {"a": "AS YOU KNOW", "b": "HE IS"}
    lower = {"a": "as you know", "b": "he was"}
    with pytest.raises(LasError, match="mostly lower case and the references upper case: .* --ignore-case"):
        score(lower, references)
    with pytest.raises(LasError, match="mostly upper case and the references lower case"):
        score({"a": "AS YOU KNOW"}, {"a": "as you know"})
    folded = score(lower, references, ignore_case=True)
    assert folded.ignore_case and folded.wer == pytest.approx(100 * 1 / 5)
    assert folded.words.confusions == [("is", "was", 1)]  # shown folded
    assert "case                  ignored (both sides case-folded)" in format_report(folded)
    as_written = score({"a": "AS YOU KNOW", "b": "He is"}, references)  # mostly the references' case
    assert not as_written.ignore_case and as_written.cer == pytest.approx(100 * 3 / 16)
    mixed = {"a": "As you know", "b": "He is"}  # a cased corpus: case is part of the spelling
    assert score({"a": "as you know", "b": "he is"}, mixed).cer == pytest.approx(100 * 2 / 16)
    assert score({"a": "bonjour"}, {"a": "你好"}).cer > 0  # references without case: nothing to refuse
    for name, texts in (("hyp.txt", lower), ("ref.txt", references)):
        (tmp_path / name).write_text("".join(f"{key} {text}\n" for key, text in texts.items()))
    assert_clear_error(*las("eval", tmp_path / "hyp.txt", tmp_path / "ref.txt")[::2], "--ignore-case")
    code, stdout, stderr = las("eval", tmp_path / "hyp.txt", tmp_path / "ref.txt", "--ignore-case", "--json")
    assert code == 0, stderr
    assert json.loads(stdout)["ignore_case"] is True and json.loads(stdout)["wer"] == pytest.approx(20.0)
