"""SpecAugment (Park et al. 2019): random frequency and time masks on a padded feature batch."""

from __future__ import annotations

import torch


def spec_augment(
    features: torch.Tensor,  # (batch, frames, bins), normalised: zero is the mean
    lengths: torch.Tensor,  # (batch,)
    frequency_masks: int,
    frequency_mask_width: int,
    time_masks: int,
    time_mask_width: int,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """A copy of `features` with bands of bins and spans of frames set to zero."""
    batch, frames, bins = features.shape
    keep = torch.ones(batch, frames, bins, dtype=torch.bool)
    positions_bins = torch.arange(bins)
    positions_frames = torch.arange(frames)
    lengths = lengths.cpu()
    for _ in range(frequency_masks):
        width = torch.randint(0, frequency_mask_width + 1, (batch,), generator=generator)
        start = (torch.rand(batch, generator=generator) * (bins - width + 1)).long()
        band = (positions_bins >= start[:, None]) & (positions_bins < (start + width)[:, None])  # (batch, bins)
        keep &= ~band[:, None, :]
    for _ in range(time_masks):
        # A mask never covers more than a fifth of an utterance, so short ones keep their content.
        limit = torch.minimum(torch.full_like(lengths, time_mask_width), lengths // 5)
        width = (torch.rand(batch, generator=generator) * (limit + 1)).long()
        start = (torch.rand(batch, generator=generator) * (lengths - width + 1)).long()
        span = (positions_frames >= start[:, None]) & (positions_frames < (start + width)[:, None])  # (batch, frames)
        keep &= ~span[:, :, None]
    return features * keep.to(features.device)
