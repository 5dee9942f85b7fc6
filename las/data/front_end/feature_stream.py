"""Features of audio as it arrives: a causal front end's frames (`features.causal`), normalised,
in groups of a fixed number of frames at fixed places, so that any way of cutting the audio into
pieces gives the same frames, bit for bit, and what follows them the same results."""

from __future__ import annotations

import torch

from las.core.errors import LasError
from las.data.front_end.features import FilterbankExtractor, Normalizer, frame_count


class FeatureStream:
    """Samples `(samples,)` in [-1, 1] pushed in pieces of any size -> groups of `group`
    normalised frames `(group, mel_bins)` as soon as the last one's window has arrived; `finish`
    gives the rest, as many frames as the whole recording's features have. Keeps less than a
    group's samples between pushes."""

    def __init__(self, extractor: FilterbankExtractor, normalizer: Normalizer, group: int) -> None:
        if not extractor.config.causal:
            raise LasError(
                "streaming needs a model whose front end reads each frame's past only: one trained "
                "with features.causal=true (data/an4/streaming.toml)"
            )
        self.extractor, self.group = extractor, group
        self.normalize = normalizer.running()
        # Samples from the window of the next frame on, the first half-window zeros as in
        # `FilterbankExtractor.log_mel`.
        self.pending = torch.zeros(extractor.window // 2)
        self.samples = 0  # pushed so far
        self.frames = 0  # given so far

    def push(self, samples: torch.Tensor) -> list[torch.Tensor]:
        self.pending = torch.cat([self.pending, samples.float()])
        self.samples += len(samples)
        window, hop = self.extractor.window, self.extractor.hop
        complete = 0 if len(self.pending) < window else 1 + (len(self.pending) - window) // hop
        return self.take(complete // self.group * self.group)

    def finish(self) -> list[torch.Tensor]:
        """The last frames, their windows' ends zeros; none for a recording shorter than a window."""
        extractor = self.extractor
        if self.samples < extractor.window:
            return []
        self.pending = torch.nn.functional.pad(self.pending, (0, extractor.window // 2))
        return self.take(frame_count(self.samples, extractor.window, extractor.hop) - self.frames)

    def take(self, count: int) -> list[torch.Tensor]:
        """The next `count` frames, normalised, a group at a time."""
        window, hop = self.extractor.window, self.extractor.hop
        groups = []
        for first in range(0, count, self.group):
            frames = min(self.group, count - first)
            samples = self.pending[first * hop : (first + frames - 1) * hop + window]
            groups.append(self.normalize(self.extractor.frames(samples)))
        self.pending = self.pending[count * hop :]
        self.frames += count
        return groups
