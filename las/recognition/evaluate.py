"""`las eval`: score hypotheses against references by edit distance and report the worst."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import Levenshtein

from las.core.errors import LasError
from las.core.metrics import EditCounts, align, edit_counts
from las.recognition.transcripts import read_transcripts
from las.recognition.word_errors import WordErrors, format_word_errors, word_errors


@dataclass(frozen=True)
class UtteranceScore:
    id: str
    hypothesis: str
    reference: str
    distance: int  # character edits (the HW4/Kaggle metric)
    word_errors: int


@dataclass(frozen=True)
class LengthBucket:
    """Scores of the utterances whose reference has `shortest`..`longest` characters."""

    shortest: int
    longest: int
    utterances: int
    cer: float
    mean_distance: float


LENGTH_EDGES = (10, 20, 30, 40, 60, 80)  # reference characters; the last bucket is open-ended


@dataclass(frozen=True)
class Report:
    utterances: int
    mean_distance: float
    cer: float  # percent
    wer: float  # percent
    substitutions: int  # character-level
    deletions: int
    insertions: int
    sentence_error_rate: float  # percent of utterances with any character error
    reference_characters: int
    reference_words: int
    ignore_case: bool  # compared without case (Unicode case folding), as `las eval --ignore-case`
    worst: list[UtteranceScore]
    by_length: list[LengthBucket]
    words: WordErrors

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def score(
    hypotheses: dict[str, str],
    references: dict[str, str],
    worst: int = 10,
    commonest: int = 10,
    known: set[str] | None = None,
    ignore_case: bool = False,
) -> Report:
    """Report over the ids of `references`; every reference needs a hypothesis and vice versa.
    `commonest`: how many of each kind of word error to list; `known`: the training transcripts'
    words, to split the reference words by; `ignore_case`: both sides case-folded first (then
    shown folded), else hypotheses mostly in a case the references never use are refused."""
    missing = [identifier for identifier in references if identifier not in hypotheses]
    extra = [identifier for identifier in hypotheses if identifier not in references]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"{len(missing)} reference id(s) have no hypothesis (e.g. {', '.join(missing[:3])})")
        if extra:
            parts.append(f"{len(extra)} hypothesis id(s) are not in the reference (e.g. {', '.join(extra[:3])})")
        raise LasError("id mismatch: " + "; ".join(parts))
    if not references:
        raise LasError("no utterances to score")
    if ignore_case:
        hypotheses = {identifier: text.casefold() for identifier, text in hypotheses.items()}
        references = {identifier: text.casefold() for identifier, text in references.items()}
    else:
        check_case(hypotheses.values(), references.values())
    scores: list[UtteranceScore] = []
    edits = EditCounts()
    words = 0
    for identifier, reference in references.items():
        hypothesis = hypotheses[identifier]
        counts = edit_counts(hypothesis, reference)
        edits += counts
        reference_words = reference.split()
        words += len(reference_words)
        word_distance = Levenshtein.distance(hypothesis.split(), reference_words)
        scores.append(UtteranceScore(identifier, hypothesis, reference, counts.errors, word_distance))
    characters = sum(len(reference) for reference in references.values())
    return Report(
        utterances=len(scores),
        mean_distance=edits.errors / len(scores),
        cer=100.0 * edits.errors / max(1, characters),
        wer=100.0 * sum(item.word_errors for item in scores) / max(1, words),
        substitutions=edits.substitutions,
        deletions=edits.deletions,
        insertions=edits.insertions,
        sentence_error_rate=100.0 * sum(item.distance > 0 for item in scores) / len(scores),
        reference_characters=characters,
        reference_words=words,
        ignore_case=ignore_case,
        worst=sorted(scores, key=lambda item: (-item.distance, item.id))[:worst],
        by_length=length_buckets(scores),
        words=word_errors(((item.hypothesis, item.reference) for item in scores), commonest, known),
    )


def check_case(hypotheses: Iterable[str], references: Iterable[str]) -> None:
    """Refuse hypotheses written mostly in the case that references of one case never use (another
    recogniser's lower case against LibriSpeech's upper case, say): scored as written, every such
    letter would be an error, and the report a figure of spelling conventions, not of recognition."""
    reference_text = "".join(references)
    upper, lower = any(map(str.isupper, reference_text)), any(map(str.islower, reference_text))
    if upper == lower:
        return  # both cases (case is part of the spelling), or no cased letters at all
    unused = str.islower if upper else str.isupper
    letters = [character for text in hypotheses for character in text if character.isupper() or character.islower()]
    if 2 * sum(map(unused, letters)) > len(letters):
        theirs, ours = ("lower", "upper") if upper else ("upper", "lower")
        raise LasError(
            f"the hypotheses are mostly {theirs} case and the references {ours} case: every such letter "
            "would count as an error; compare them with --ignore-case"
        )


def length_buckets(scores: list[UtteranceScore]) -> list[LengthBucket]:
    buckets = []
    for shortest, longest in zip((0, *(edge + 1 for edge in LENGTH_EDGES)), (*LENGTH_EDGES, 10**9), strict=True):
        members = [item for item in scores if shortest <= len(item.reference) <= longest]
        if members:
            distance = sum(item.distance for item in members)
            characters = sum(len(item.reference) for item in members)
            buckets.append(
                LengthBucket(
                    shortest, longest, len(members), 100.0 * distance / max(1, characters), distance / len(members)
                )
            )
    return buckets


def evaluate_files(
    hypothesis_path: str | Path,
    reference_path: str | Path,
    worst: int = 10,
    commonest: int = 10,
    known_path: str | Path | None = None,
    ignore_case: bool = False,
) -> Report:
    """`score` of two files; `known_path`: the training transcripts (any format `score` reads)."""
    known = None if known_path is None else known_words(known_path)
    hypotheses, references = read_transcripts(hypothesis_path), read_transcripts(reference_path)
    return score(hypotheses, references, worst, commonest, known, ignore_case)


def known_words(path: str | Path) -> set[str]:
    """The words of the training transcripts at `path` (`las eval --known`)."""
    try:
        transcripts = read_transcripts(path)
    except LasError as error:
        raise LasError(f"--known: {error}") from None
    if not transcripts:
        raise LasError(f"--known {path}: no transcripts in it")
    return {word.casefold() for text in transcripts.values() for word in text.split()}


def format_report(report: Report, by_length: bool = False) -> str:
    words = report.words.counts
    lines = [
        f"utterances            {report.utterances}",
        f"mean distance         {report.mean_distance:.3f} character edits per utterance",
        f"CER                   {report.cer:.2f}%  ({report.substitutions} sub, {report.deletions} del, "
        f"{report.insertions} ins over {report.reference_characters} characters)",
        f"WER                   {report.wer:.2f}%  ({words.substitutions} sub, {words.deletions} del, "
        f"{words.insertions} ins over {report.reference_words} words)",
        f"sentence error rate   {report.sentence_error_rate:.2f}%",
        *(["case                  ignored (both sides case-folded)"] if report.ignore_case else []),
        *format_word_errors(report.words),
    ]
    if by_length:
        lines += ["", "by reference length (characters):"]
        for bucket in report.by_length:
            span = f"{bucket.shortest}-{bucket.longest}" if bucket.longest < 10**9 else f"{bucket.shortest}+"
            lines.append(
                f"  {span:>7}  {bucket.utterances:6d} utterances  CER {bucket.cer:6.2f}%  "
                f"mean distance {bucket.mean_distance:.3f}"
            )
    if report.worst:
        lines += ["", f"worst {len(report.worst)} utterances:"]
        for item in report.worst:
            reference, hypothesis, marks = align(item.hypothesis, item.reference)
            lines += [
                f"  {item.id}  ({item.distance} character edits, {item.word_errors} word errors)",
                f"    REF: {reference}",
                f"    HYP: {hypothesis}",
                f"         {marks}".rstrip(),
            ]
    return "\n".join(lines)
