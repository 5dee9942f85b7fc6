"""Training draws cut out of their utterances at the word times: one word alone
(`train.augment.words`), or all of its words, from the first one's start to the last one's end
(`train.augment.tight`).

A model that has only heard whole AN4 utterances spells an isolated "TWO" as the command "GO":
one-word utterances it knows are commands. Drawing some training items as one word of their
utterance, with a little of what surrounds it, teaches it that any word can stand alone, and how
a word sounds when it is cut at its edges. A clip cut at its first and last words (by word times,
as an editor or an aligner cuts) starts on the first sound of its first word, often later than the
first frame the front end hears as loud: the front end's crops (`train.augment.crop`) never start
there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch

from las.core.config import Config
from las.core.progress import warn
from las.data.corpora.ctm import WordTime, read_ctm, read_digests
from las.data.corpora.utterances import Utterance

MARGIN_SECONDS = 0.2  # at most this much of what surrounds a word comes with it on each side


class Excerpt(NamedTuple):
    start: int  # [start, end) feature frames of the utterance at the draw's speed
    end: int
    text: str  # the words heard


@dataclass(frozen=True)
class WordExcerpts:
    share: float  # of the training draws that become one word of their utterance
    frame_seconds: float
    word_times: Sequence[Sequence[WordTime]]  # per training utterance; empty where unknown
    tight: float = 0.0  # of the draws that become all of their words, cut at the first and last

    @classmethod
    def of(
        cls, config: Config, utterances: Sequence[Utterance], digests: Callable[[], Sequence[str]]
    ) -> WordExcerpts | None:
        """From `data.train_alignment` (`auto`: the training manifest's CTM beside it, when there
        is one), for utterances in this order; None when off or when no utterance has word times.
        Word times are stale, and not used, where the words are not the utterance's transcript, or
        where its file's content (`digests`, in the same order) is not what they were found in."""
        augment = config.train.augment
        path = alignment_path(config.data.train, config.data.train_alignment)
        if not (augment.words or augment.tight) or path is None:
            return None
        times: Mapping[str, list[WordTime]] = read_ctm(path)
        aligned_on = read_digests(path)
        current = digests() if aligned_on else [""] * len(utterances)
        word_times, stale = [], 0
        for utterance, digest in zip(utterances, current, strict=True):
            words = times.get(utterance.id, [])
            spoken = " ".join(word.word for word in words)
            if words and (
                spoken != " ".join(str(utterance.text).split()) or aligned_on.get(utterance.id, digest) != digest
            ):
                words, stale = [], stale + 1
            word_times.append(words)
        if stale:
            warn(
                f"{path}: word times of {stale} training utterances are stale (their transcript or audio changed "
                "since `las align`): they train whole; align them again"
            )
        known = sum(bool(words) for words in word_times)
        if not known:
            warn(f"{path}: no word times for any training utterance; train.augment.words and tight are off")
            return None
        if known < len(utterances):
            warn(f"{path}: word times for {known} of {len(utterances)} training utterances")
        return cls(augment.words, config.features.hop_ms / 1000, word_times, augment.tight)

    def draw(self, index: int, speed: float, frames: int, generator: torch.Generator) -> Excerpt | None:
        """Utterance `index` heard at `speed` (its features `frames` long) cut at its word times: one
        word (with probability `share`, where it has two or more) or all of them (`tight`), with
        up to MARGIN_SECONDS of what surrounds them on each side, never reaching into a
        neighbouring word; None when this draw keeps the whole utterance."""
        words = self.word_times[index]
        chance, pick, before, after = torch.rand(4, generator=generator, dtype=torch.float64).tolist()
        if not words:
            return None
        if len(words) >= 2 and chance < self.share:
            first = last = min(int(pick * len(words)), len(words) - 1)
        elif self.share <= chance < self.share + self.tight:
            first, last = 0, len(words) - 1
        else:
            return None
        previous_end = words[first - 1].end if first > 0 else 0.0
        next_start = words[last + 1].start if last + 1 < len(words) else float("inf")
        start = words[first].start - before * min(MARGIN_SECONDS, max(0.0, words[first].start - previous_end))
        end = words[last].end + after * min(MARGIN_SECONDS, max(0.0, next_start - words[last].end))
        scale = 1 / (speed * self.frame_seconds)  # seconds as recorded -> frames at this speed
        start_frame = min(max(0, round(start * scale)), frames - 1)
        text = " ".join(word.word for word in words[first : last + 1])
        return Excerpt(start_frame, min(frames, max(start_frame + 1, round(end * scale))), text)


def alignment_path(train: str, alignment: str) -> Path | None:
    """The CTM file of the training utterances' word times: `alignment`, or for `auto` the
    manifest's name with `.ctm` (a folder's `words.ctm`) where that exists; None for none."""
    if alignment != "auto":
        return Path(alignment) if alignment else None
    found = ctm_beside(train)
    return found if found.is_file() else None


def missing_word_times(config: Config) -> str | None:
    """What to tell a run that would cut single words and tight crops but finds no word times
    beside its manifest (most corpora come without: training on whole utterances is right for
    them, and a user who expected the cuts learns why there are none); None otherwise."""
    augment, data = config.train.augment, config.data
    if not (augment.words or augment.tight) or alignment_path(data.train, data.train_alignment) is not None:
        return None
    if data.train_alignment != "auto":
        return None
    return (
        f"no word times beside {data.train} ({ctm_beside(data.train)}): train.augment.words and tight are off "
        "(`las align MODEL TRAIN --out FILE.ctm` finds them)"
    )


def ctm_beside(train: str) -> Path:
    """Where `auto` looks for a training manifest's word times: its name with `.ctm`, or a
    folder's `words.ctm`."""
    return Path(train) / "words.ctm" if Path(train).is_dir() else Path(train).with_suffix(".ctm")
