"""Edit-distance scoring: per-utterance Levenshtein distance, CER, WER and S/D/I counts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import Levenshtein


@dataclass(frozen=True)
class EditCounts:
    substitutions: int = 0
    deletions: int = 0
    insertions: int = 0

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    def __add__(self, other: EditCounts) -> EditCounts:
        return EditCounts(
            self.substitutions + other.substitutions,
            self.deletions + other.deletions,
            self.insertions + other.insertions,
        )


def edit_counts(hypothesis: Sequence, reference: Sequence) -> EditCounts:
    """S/D/I of the cheapest alignment turning `reference` into `hypothesis` (strings or word lists)."""
    operations = [operation for operation, _, _ in Levenshtein.editops(reference, hypothesis)]
    return EditCounts(operations.count("replace"), operations.count("delete"), operations.count("insert"))


def character_error_rate(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Total character edit distance over total reference characters, in percent (spaces count)."""
    distance = sum(Levenshtein.distance(h, r) for h, r in zip(hypotheses, references, strict=True))
    return 100.0 * distance / max(1, sum(len(r) for r in references))


def word_error_rate(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Total word edit distance over total reference words, in percent."""
    pairs = list(zip(hypotheses, references, strict=True))
    errors = sum(Levenshtein.distance(hypothesis.split(), reference.split()) for hypothesis, reference in pairs)
    return 100.0 * errors / max(1, sum(len(reference.split()) for _, reference in pairs))


def align(hypothesis: str, reference: str) -> tuple[str, str, str]:
    """Reference and hypothesis laid out column by column, `*` filling gaps, with a third line
    marking each column S (substitution), D (deletion) or I (insertion)."""
    reference_line, hypothesis_line, marks = [], [], []
    for operation, ref_start, ref_end, hyp_start, hyp_end in Levenshtein.opcodes(reference, hypothesis):
        ref_part, hyp_part = reference[ref_start:ref_end], hypothesis[hyp_start:hyp_end]
        width = max(len(ref_part), len(hyp_part))
        reference_line.append(ref_part.ljust(width, "*"))
        hypothesis_line.append(hyp_part.ljust(width, "*"))
        mark = {"equal": " ", "replace": "S", "delete": "D", "insert": "I"}[operation]
        marks.append(mark * width)
    return "".join(reference_line), "".join(hypothesis_line), "".join(marks)


def correct_words(hypothesis: Sequence[str], reference: Sequence[str]) -> list[bool]:
    """For each hypothesis word, whether the cheapest alignment to `reference` matches it to the
    same word (not a substitution or an insertion)."""
    correct = [False] * len(hypothesis)
    for operation, _, _, start, end in Levenshtein.opcodes(list(reference), list(hypothesis)):
        if operation == "equal":
            correct[start:end] = [True] * (end - start)
    return correct
