"""Training losses: masked, label-smoothed cross-entropy and the joint CTC-attention objective.

Each loss is a sum over characters divided by a character count. The count defaults to this
batch's; data-parallel training passes the whole global batch's, so that the ranks' losses add up
to the loss one process would compute on the global batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from las.core.text import PAD_INDEX as PAD
from las.model.las import LASOutput


def attention_loss(
    logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float, characters: int | None = None
) -> torch.Tensor:
    """Cross-entropy per target character; padding positions contribute nothing."""
    # logits: (batch, steps, vocabulary); targets: (batch, steps) with PAD after each <eos>
    total = F.cross_entropy(
        logits.transpose(1, 2), targets, ignore_index=PAD, label_smoothing=label_smoothing, reduction="sum"
    )
    return total / (characters if characters is not None else int((targets != PAD).sum().clamp_min(1)))


def ctc_loss(
    log_probs: torch.Tensor,
    encoder_lengths: torch.Tensor,
    targets: torch.Tensor,
    target_lengths: torch.Tensor,
    characters: int | None = None,
) -> torch.Tensor:
    """CTC loss per target character; `targets` are the characters without <eos>, PAD-padded."""
    # log_probs: (frames, batch, vocabulary); targets: (batch, characters)
    total = F.ctc_loss(
        log_probs.float(), targets, encoder_lengths, target_lengths, blank=PAD, reduction="sum", zero_infinity=True
    )
    return total / (characters if characters is not None else int(target_lengths.sum().clamp_min(1)))


def joint_loss(
    output: LASOutput,
    targets_in: torch.Tensor,  # (batch, steps): <sos> then characters, PAD-padded
    targets_out: torch.Tensor,  # (batch, steps): characters then <eos>, PAD-padded
    target_lengths: torch.Tensor,  # (batch,) including <eos>
    ctc_weight: float,
    label_smoothing: float,
    global_target_lengths: torch.Tensor | None = None,  # (global batch,): the counts to divide by
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """λ·CTC + (1-λ)·attention (Kim et al. 2017), with both parts for logging (detached, on the
    loss's device: a training step reads everything it logs from the device at once)."""
    lengths = target_lengths if global_target_lengths is None else global_target_lengths
    attention = attention_loss(output.logits, targets_out, label_smoothing, int(lengths.sum()))
    if output.ctc_log_probs is None or ctc_weight == 0:
        return attention, {"attention_loss": attention.detach()}
    # CTC targets are the characters alone: targets_in without its leading <sos>.
    ctc_characters = max(1, int((lengths - 1).sum()))
    ctc = ctc_loss(output.ctc_log_probs, output.memory.lengths, targets_in[:, 1:], target_lengths - 1, ctc_characters)
    loss = ctc_weight * ctc + (1 - ctc_weight) * attention
    return loss, {"attention_loss": attention.detach(), "ctc_loss": ctc.detach()}
