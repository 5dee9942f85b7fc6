"""Which words a recogniser gets wrong (sclite's confusion pairs, deletions and insertions), and
how it reads the words its training transcripts never held against those they did: an
open-vocabulary model's errors split between spelling new words and hearing known ones."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

import Levenshtein

from las.core.metrics import EditCounts

Item = TypeVar("Item")


@dataclass(frozen=True)
class KnownWords:
    """Reference words split by whether the training transcripts hold them; `*_wrong`: those of
    them substituted or deleted (an insertion belongs to no reference word)."""

    known: int
    known_wrong: int
    unknown: int
    unknown_wrong: int

    @property
    def unknown_share(self) -> float:
        """Percent of the reference words the training transcripts never held (the OOV rate)."""
        return 100.0 * self.unknown / max(1, self.known + self.unknown)


@dataclass(frozen=True)
class WordErrors:
    counts: EditCounts  # word substitutions, deletions and insertions
    confusions: list[tuple[str, str, int]]  # (reference word, hypothesis word, times), most frequent first
    deleted: list[tuple[str, int]]
    inserted: list[tuple[str, int]]
    known_words: KnownWords | None


def word_errors(pairs: Iterable[tuple[str, str]], most: int, known: set[str] | None = None) -> WordErrors:
    """The word errors of (hypothesis, reference) `pairs`: counts, the `most` frequent of each
    kind, and with `known` (the training transcripts' words, case-folded: a lower-case training
    text holds the words of an upper-case reference) the reference words split by it."""
    confusions: Counter[tuple[str, str]] = Counter()
    deleted: Counter[str] = Counter()
    inserted: Counter[str] = Counter()
    wrong: Counter[bool] = Counter()  # by whether `known` holds the reference word
    words: Counter[bool] = Counter()
    for hypothesis, reference in pairs:
        hypothesis_words, reference_words = hypothesis.split(), reference.split()
        missed = set()
        for operation, at_reference, at_hypothesis in Levenshtein.editops(reference_words, hypothesis_words):
            if operation == "replace":
                confusions[reference_words[at_reference], hypothesis_words[at_hypothesis]] += 1
                missed.add(at_reference)
            elif operation == "delete":
                deleted[reference_words[at_reference]] += 1
                missed.add(at_reference)
            else:
                inserted[hypothesis_words[at_hypothesis]] += 1
        if known is not None:
            for index, word in enumerate(reference_words):
                held = word.casefold() in known
                words[held] += 1
                wrong[held] += index in missed
    counts = EditCounts(confusions.total(), deleted.total(), inserted.total())
    split = KnownWords(words[True], wrong[True], words[False], wrong[False]) if known is not None else None
    return WordErrors(
        counts,
        [(reference, hypothesis, times) for (reference, hypothesis), times in most_frequent(confusions, most)],
        most_frequent(deleted, most),
        most_frequent(inserted, most),
        split,
    )


def most_frequent(counter: Counter[Item], most: int) -> list[tuple[Item, int]]:
    """The `most` commonest, ties in sorted order so that a report reads the same every run."""
    return sorted(counter.items(), key=lambda item: (-item[1], item[0]))[:most]


def format_word_errors(errors: WordErrors) -> list[str]:
    """The report's lines after its WER (which gives the counts)."""
    lines = []
    if (split := errors.known_words) is not None:
        lines.append(
            f"unseen words          {split.unknown_share:.2f}% of the reference words are not in the training "
            f"transcripts; wrong: {rate(split.unknown_wrong, split.unknown)} of them, "
            f"{rate(split.known_wrong, split.known)} of the others"
        )
    listed = [
        ("confusion pairs (reference -> hypothesis)", [(f"{ref} -> {hyp}", n) for ref, hyp, n in errors.confusions]),
        ("deleted words", errors.deleted),
        ("inserted words", errors.inserted),
    ]
    for title, rows in listed:
        if rows:
            lines += ["", f"{title}:"] + [f"  {times:5d}  {words}" for words, times in rows]
    return lines


def rate(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.2f}%" if whole else "-"
