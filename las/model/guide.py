"""The CTC head's alignment as a teacher for the attention in the first steps of training from
scratch on long utterances.

From scratch, attention over hundreds of encoder frames starts uniform; its context is then an
average of the whole recording and tells the speller nothing, so the speller learns the
transcripts' characters alone and the attention never finds its place, while the CTC head on the
same listener learns where the characters are (docs/archive/experiments.md, "Long utterances from
scratch"). So once a batch's CTC loss has fallen under `trigger` nats a character (before that
its alignment is noise), the attention of each character is also trained towards a Gaussian
around the frame where the head's forced alignment of the transcript puts that character,
`width` of the recording wide: a guided attention loss (Tachibana et al. 2017) whose guide is
the CTC alignment rather than the diagonal, which speech over 10 s does not keep to. It is the
attention's own weights that learn, so nothing is taken away when the guide ends: a prior added
to the scores instead placed the context as well, and the speller fell back when it went.
Decoding never uses it.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from las.core.text import PAD_INDEX
from las.model.ctc_path import ctc_frames_needed, runs, viterbi_paths
from las.model.las import LASOutput


class Guide(NamedTuple):
    """The guide at one step of training: `weight` of its loss beside the joint loss, `width` the
    Gaussian's standard deviation as a share of the recording, `trigger` the CTC loss per
    character under which the head's alignment is trusted."""

    weight: float
    width: float
    trigger: float

    def loss(self, output: LASOutput, targets_in: torch.Tensor) -> torch.Tensor | None:
        """How far the attention `(batch, steps, frames)` is from the Gaussians around the CTC
        head's alignment: their Kullback-Leibler divergence (the cross-entropy less the guide's
        own entropy, so 0 where the attention is the guide), per character of the utterances it
        aligns; None while the head has not learnt. `targets_in` `(batch, steps)`: <sos>, then
        the characters."""
        targets = self.targets(output.ctc_log_probs, output.memory.lengths, targets_in)
        if targets is None:
            return None
        guided, rows = targets
        steps = (targets_in != PAD_INDEX) & rows[:, None]  # each character and <eos> of the aligned rows
        ratio = guided.clamp_min(1e-8).log() - output.attention.float().clamp_min(1e-8).log()
        divergence = (guided * ratio).sum(dim=2)  # (batch, steps)
        return (divergence * steps).sum() / steps.sum()

    def targets(
        self, ctc_log_probs: torch.Tensor | None, encoder_lengths: torch.Tensor, targets_in: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor] | None:
        """Where each step should attend `(batch, steps, frames)`, a Gaussian around its
        character's frame on the CTC head's alignment (on the valid frames, summing to 1), and
        which utterances have one `(batch,)`; None while the head has not learnt. From
        `ctc_log_probs` `(frames, batch, vocabulary)` and `encoder_lengths` `(batch,)`."""
        if ctc_log_probs is None:
            return None
        characters = targets_in[:, 1:]
        tokens = [[token for token in row if token != PAD_INDEX] for row in characters.tolist()]
        # An utterance too short for its characters has no alignment to follow, nor a finite CTC loss.
        counts = encoder_lengths.tolist()
        rows = torch.tensor(
            [bool(row) and count >= ctc_frames_needed(row) for row, count in zip(tokens, counts, strict=True)]
        )
        lengths = (characters != PAD_INDEX).sum(dim=1)
        with torch.no_grad():
            losses = F.ctc_loss(
                ctc_log_probs.float(), characters, encoder_lengths, lengths, blank=PAD_INDEX, reduction="none"
            )
        rows = rows.to(losses.device)
        if not rows.any() or float(losses[rows].sum() / lengths[rows].sum()) >= self.trigger:
            return None
        centres = aligned_frames(ctc_log_probs, encoder_lengths, tokens, rows, targets_in.shape[1])
        frames = torch.arange(ctc_log_probs.shape[0], device=ctc_log_probs.device)
        scale = (self.width * encoder_lengths.clamp_min(1).float())[:, None, None]
        distance = (frames[None, None, :] - centres[:, :, None]) / scale  # (batch, steps, frames)
        valid = frames[None, None, :] < encoder_lengths[:, None, None]
        log_density = distance.square_().mul_(-0.5).masked_fill_(~valid, float("-inf"))
        return log_density.softmax(dim=2), rows


def aligned_frames(
    ctc_log_probs: torch.Tensor, encoder_lengths: torch.Tensor, tokens: list[list[int]], rows: torch.Tensor, steps: int
) -> torch.Tensor:
    """The middle of each step's character on the CTC head's forced alignment of the utterance's
    `tokens`, in encoder frames `(batch, steps)`, for the utterances `rows` `(batch,)` says have
    frames enough; <eos>, padding steps and the other utterances at their last frame."""
    centres = (encoder_lengths.float().cpu() - 1)[:, None].repeat(1, steps)
    aligned = rows.cpu().nonzero().flatten().tolist()
    log_probs = ctc_log_probs.detach().transpose(0, 1)[aligned]  # (aligned, frames, vocabulary)
    frames = [int(encoder_lengths[row]) for row in aligned]
    for row, path in zip(
        aligned, viterbi_paths(log_probs, frames, [tokens[row] for row in aligned], PAD_INDEX), strict=True
    ):
        centres[row, : len(tokens[row])] = torch.tensor([(start + end - 1) / 2 for start, end in runs(path, PAD_INDEX)])
    return centres.to(ctc_log_probs.device)


def guide_weight(step: int, steps: int) -> float:
    """The guide's weight at training step `step` (from 0) of a guide that lasts `steps`: whole
    for the first half, then falling linearly to 0."""
    if steps <= 0:
        return 0.0
    return min(1.0, max(0.0, 2.0 * (1.0 - step / steps)))
