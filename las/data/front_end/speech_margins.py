"""What a model hears around the speech of an utterance: the same, whatever the recording had.

A model trained on AN4 has heard about 0.33 s of background before each utterance and 0.2 s
after it. Recordings bring anything from none (a clip cut at the word) to seconds (padded
exports, a phone app that records before its user speaks). Seconds of digital silence moved the
per-utterance mean and drew the attention away from the first word (7.6x the CER of the same
utterances unpadded), so the front end keeps at most `margin` frames of non-speech at each end,
in training and in decoding alike. Training also hears tight crops, so that less is no surprise,
and more of the recording's background than AN4 has around its words: the front end passes what
it takes for speech, and a lead-in louder than the room around it, or a swell of the room's
noise, is more than the margin.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from las.core.config import Config
from las.data.front_end.segmentation import Levels, frame_energy, median_energy

EXTEND_FRAMES = 100  # a draw that hears more background hears up to 1 s more at each end
BACKGROUND_FRAMES = 20  # drawn from the quietest 0.2 s of the draw (as channels.own_background) ...
PIECE_FRAMES = 5  # ... in pieces of 50 ms
# A background this far under the speech (median frame energies, in nats: about 22 dB) is told
# from it surely: AN4 dev's lies 5.4-8.2 nats under its speech (10th to 90th percentile), and so
# do its telephone and room versions'; white noise and babble at 20 dB 3.9-5.7, at 10 dB 2.4-4.8.
CLEAR_NATS = 5.0


class Edges(NamedTuple):
    """All that `Surroundings` reads of a recording's `Levels`: where its speech is and how much
    is heard around it. A few numbers, where the levels are a pass over every frame."""

    first: int  # the speech's first frame
    last: int  # and one past its last
    lead: int  # heard frames just before `first` (up to digital silence or an inserted sound)
    trail: int  # and just from `last` on
    clear: bool  # whether the background stands CLEAR_NATS under the speech (read only with a `share`)


class SharedEdges:
    """A `Surroundings` policy over a training or dev set, with the `Edges` of each utterance at
    each speed computed by whichever process first reads it and kept in shared memory, where the
    DataLoader's workers, started afresh every epoch, find them: the levels were a fifth of a
    training draw's time (1.7 of 8.5 s of an AN4 epoch's draws in one thread, most of the rest
    the waveform effects)."""

    def __init__(self, surroundings: Surroundings, variants: int, count: int) -> None:
        self.surroundings = surroundings
        # -1: not yet computed (a speech's first frame is never negative).
        self.values = torch.full((variants, count, len(Edges._fields)), -1, dtype=torch.int32).share_memory_()

    def heard(
        self,
        variant: int,
        index: int,
        recorded: torch.Tensor,
        features: torch.Tensor,
        generator: torch.Generator | None,
    ) -> torch.Tensor:
        """`features` `(frames, mel_bins)` of utterance `index` at speed `variant` as the model
        hears them (`Surroundings.heard`), its edges read from its features as `recorded`."""
        row = self.values[variant, index]
        if row[0] >= 0:
            first, last, lead, trail, clear = row.tolist()
            edges = Edges(first, last, lead, trail, bool(clear))
        else:
            edges = self.surroundings.edges(Levels.of(recorded))
            values = torch.tensor(edges, dtype=torch.int32)
            row[1:] = values[1:]
            row[0] = values[0]  # last: a row is read as known only once the rest of it is there
        return self.surroundings.heard(features, edges, generator)

    def subset(self, indices: Sequence[int]) -> SharedEdges:
        """The utterances at `indices`, in that order, with what is known of them."""
        part = SharedEdges(self.surroundings, len(self.values), len(indices))
        part.values.copy_(self.values[:, list(indices)])
        return part


@dataclass(frozen=True)
class Surroundings:
    margin: int  # frames of non-speech kept at each end at most
    crop: float = 0.0  # probability that a training draw is cut tighter (see `span`)
    extend: float = 0.0  # probability that it hears more of its background instead (see `heard`)
    share: float | None = None  # of background, at most this share of the speech's length (`kept`)

    @classmethod
    def of(cls, config: Config, decoding: bool = False) -> Surroundings | None:
        """The front end's policy for features computed from audio, in training or, with
        `decoding`, for what is decoded (dev passes too); None where it is off."""
        features = config.features
        if not features.trim_surroundings:
            return None
        seconds, share = features.surroundings_seconds, None
        if decoding:
            seconds, share = min(seconds, config.decode.surroundings_seconds), config.decode.surroundings_share
        return cls(features.frames(seconds), config.train.augment.crop, config.train.augment.surroundings, share)

    def kept(self, run: int, first: int, last: int, clear: bool) -> int:
        """How many of the `run` heard frames on one side of the speech at `[first, last)` to keep:
        up to the margin, and of a `clear` background (CLEAR_NATS under the speech) that goes on
        past it, at most `share` of the speech's length. A word alone heard with a sentence's
        margin of its background is more background than word, which the model never heard
        around a word (single words with 0.5 s of their own background: 48% right with 0.2 s of
        it kept, 63% with this, against 66% alone). Only a clear one: a clip that ends within the margin was cut
        at its speech, and in noise the speech's edges are found short of its soft sounds; the
        margin keeps what the trim left out (white noise at 10 dB lost 0.4-0.8 points without
        the condition)."""
        if self.share is None or run <= self.margin or not clear:
            return min(run, self.margin)
        return min(self.margin, round(self.share * (last - first)))

    def edges(self, levels: Levels) -> Edges:
        """What `drawn` reads of a recording with these `levels`."""
        first, last = levels.speech_extent()
        clear = self.share is not None and surroundings_contrast(levels, first, last) >= CLEAR_NATS
        return Edges(first, last, *levels.heard_around(first, last), clear)

    def span(self, levels: Levels, generator: torch.Generator | None = None) -> tuple[int, int]:
        """`[start, end)` frames of a recording with these `levels` to hear: its speech with at most
        `margin` frames around it, and none of the digital silence beyond (exact zeros sit at the
        log floor, far below any background a model has heard). With a `generator` (a training
        draw), with probability `crop`, the lead-in and the trail are each cut to a uniform share
        of themselves, down to none."""
        start, end, _, _ = self.drawn(self.edges(levels), generator)
        return start, end

    def heard(self, features: torch.Tensor, edges: Edges, generator: torch.Generator | None = None) -> torch.Tensor:
        """`features` `(frames, mel_bins)` of a recording with these `edges` (as recorded: noise
        drawn into the features cannot move the speech's edges) as a model hears them: cut to their
        `span`, and in a training draw, with probability `extend` (where it is not cropped), with
        up to EXTEND_FRAMES of its own background (`background_frames`) more before and after it."""
        start, end, before, after = self.drawn(edges, generator)
        features = features[start:end]
        if not before and not after:
            return features
        assert generator is not None  # only a draw extends
        return torch.cat(
            [background_frames(features, before, generator), features, background_frames(features, after, generator)]
        )

    def drawn(self, edges: Edges, generator: torch.Generator | None) -> tuple[int, int, int, int]:
        """`span`'s `start, end`, and how many frames of background a draw adds before and after."""
        first, last = edges.first, edges.last
        lead, trail = (self.kept(run, first, last, edges.clear) for run in (edges.lead, edges.trail))
        before = after = 0
        # One draw decides: cropped, extended or as it is (none without either, as before them).
        if generator is not None and (self.crop > 0 or self.extend > 0):
            chance = torch.rand((), generator=generator).item()
            if chance < self.crop:
                lead = int(torch.randint(lead + 1, (), generator=generator))
                trail = int(torch.randint(trail + 1, (), generator=generator))
            elif chance < self.crop + self.extend:
                before = int(torch.randint(EXTEND_FRAMES + 1, (), generator=generator))
                after = int(torch.randint(EXTEND_FRAMES + 1, (), generator=generator))
        return first - lead, last + trail, before, after

    def trim(self, features: torch.Tensor) -> torch.Tensor:
        """`features` `(frames, mel_bins)` as heard outside training: `span` without a draw."""
        start, end = self.span(Levels.of(features))
        return features[start:end]


def surroundings_contrast(levels: Levels, first: int, last: int) -> float:
    """How far, in nats, the median loud frame of the speech at `[first, last)` stands above the
    median quiet frame around it; -inf where nothing heard around it is quiet."""
    speech = torch.zeros_like(levels.pauses)
    speech[first:last] = ~levels.pauses[first:last]
    around = levels.pauses.clone()
    around[first:last] = False
    contrast = median_energy(levels, speech) - median_energy(levels, around)
    return -math.inf if math.isnan(contrast) else contrast


def background_frames(features: torch.Tensor, count: int, generator: torch.Generator) -> torch.Tensor:
    """`(count, mel_bins)` of the background of `features` `(frames, mel_bins)`, as if the recording
    had gone on: random PIECE_FRAMES pieces of its quietest BACKGROUND_FRAMES, end to end."""
    span = min(BACKGROUND_FRAMES, len(features))
    energy = frame_energy(features).unfold(0, span, 1).mean(dim=1)  # (positions,)
    quietest = int(energy.argmin())
    pool = features[quietest : quietest + span]
    piece = min(PIECE_FRAMES, span)
    offsets = torch.randint(span - piece + 1, (-(-count // piece),), generator=generator).tolist()
    return torch.cat([pool[offset : offset + piece] for offset in offsets] or [features[:0]])[:count]
