"""What a model hears around the speech of an utterance: the same, whatever the recording had.

A model trained on AN4 has heard about 0.33 s of background before each utterance and 0.2 s
after it. Recordings bring anything from none (a clip cut at the word) to seconds (padded
exports, a phone app that records before its user speaks). Seconds of digital silence moved the
per-utterance mean and drew the attention away from the first word (7.6x the CER of the same
utterances unpadded), so the front end keeps at most `margin` frames of non-speech at each end,
in training and in decoding alike; training also hears tight crops, so that less is no surprise.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from las.config import Config
from las.segmentation import Levels


@dataclass(frozen=True)
class Surroundings:
    margin: int  # frames of non-speech kept at each end at most
    crop: float = 0.0  # probability that a training draw is cut tighter (see `span`)

    @classmethod
    def of(cls, config: Config) -> Surroundings | None:
        """The front end's policy for features computed from audio; None where it is off."""
        features = config.features
        if not features.trim_surroundings:
            return None
        margin = round(features.surroundings_seconds * 1000 / features.hop_ms)
        return cls(margin, config.train.augment.crop)

    def span(self, levels: Levels, generator: torch.Generator | None = None) -> tuple[int, int]:
        """`[start, end)` frames of a recording with these `levels` to hear: its speech with at most
        `margin` frames around it, and none of the digital silence beyond (exact zeros sit at the
        log floor, far below any background a model has heard). With a `generator` (a training
        draw), with probability `crop`, the lead-in and the trail are each cut to a uniform share
        of themselves, down to none."""
        first, last = levels.speech_extent()
        lead, trail = (
            min(heard_run(levels.heard[:first].flip(0)), self.margin),
            min(heard_run(levels.heard[last:]), self.margin),
        )
        if generator is not None and self.crop > 0 and torch.rand((), generator=generator).item() < self.crop:
            lead = int(torch.randint(lead + 1, (), generator=generator))
            trail = int(torch.randint(trail + 1, (), generator=generator))
        return first - lead, last + trail

    def trim(self, features: torch.Tensor) -> torch.Tensor:
        """`features` `(frames, mel_bins)` as heard outside training: `span` without a draw."""
        start, end = self.span(Levels.of(features))
        return features[start:end]


def heard_run(heard: torch.Tensor) -> int:
    """How many of the flags `(frames,)` are True before the first False."""
    silent = (~heard).nonzero()
    return int(silent[0]) if len(silent) else len(heard)
