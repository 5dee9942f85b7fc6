"""How diagonal an attention map is: the sign that a LAS model has learned to align.

A speller that reads the utterance left to right moves its attention peak forward (or keeps it)
at almost every step and sweeps across most of the encoder frames; one that has not learned to
align stares at a few frames or jumps around.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MONOTONIC_THRESHOLD = 0.9  # share of steps whose peak does not move back
COVERAGE_THRESHOLD = 0.5  # share of encoder frames the peaks sweep across


@dataclass(frozen=True)
class Alignment:
    monotonic: float  # share of steps after the first whose argmax frame is >= the previous one's
    coverage: float  # (last peak - first peak + 1) / encoder frames, 0 if the peaks move back overall

    @classmethod
    def of(cls, weights: torch.Tensor) -> Alignment:
        """From the weights `(steps, encoder_frames)` of one decoded utterance. Steps that attend
        to nothing (hard monotonic attention that selected no frame) have no peak."""
        peaks = weights[weights.sum(dim=1) > 0].argmax(dim=1)
        if len(peaks) < 2:
            return cls(0.0, 0.0)
        monotonic = float((peaks[1:] >= peaks[:-1]).float().mean())
        coverage = max(0.0, float(peaks[-1] - peaks[0] + 1) / weights.shape[1])
        return cls(round(monotonic, 3), round(coverage, 3))

    @classmethod
    def of_decoding(cls, attention: torch.Tensor) -> Alignment:
        """From a decoded hypothesis' weights `(characters + 1, encoder_frames)`, its last row (<eos>)
        left out: once everything is spelled, attention may rest anywhere (cumulative attention
        returns to the frames it never attended, often the silence at the start)."""
        return cls.of(attention[:-1])

    @property
    def diagonal(self) -> bool:
        return self.monotonic >= MONOTONIC_THRESHOLD and self.coverage >= COVERAGE_THRESHOLD


def diagonal_rows(attention: torch.Tensor, characters: torch.Tensor, encoder_lengths: torch.Tensor) -> torch.Tensor:
    """Which rows of a teacher-forced batch attend along a diagonal `(batch,)` bool, as
    `Alignment.diagonal` judges one decoded utterance: from the weights `attention`
    `(batch, steps, encoder_frames)`, each row's `characters` `(batch,)` (its steps before <eos>)
    and `encoder_lengths` `(batch,)`. A row of fewer than two characters is not."""
    peaks = attention.detach().argmax(dim=2)  # (batch, steps)
    steps = torch.arange(peaks.shape[1], device=peaks.device)
    characters = characters.to(peaks.device)
    pairs = (steps[None, 1:] < characters[:, None]).float()  # (batch, steps - 1): both steps characters
    forward = ((peaks[:, 1:] >= peaks[:, :-1]).float() * pairs).sum(dim=1) / pairs.sum(dim=1).clamp_min(1)
    last = peaks.gather(1, (characters - 1).clamp_min(0)[:, None])[:, 0]
    coverage = (last - peaks[:, 0] + 1).float() / encoder_lengths.to(peaks.device).clamp_min(1)
    return (characters >= 2) & (forward >= MONOTONIC_THRESHOLD) & (coverage >= COVERAGE_THRESHOLD)
