"""The LSTM speller's teacher-forced pass in shape buckets of (rows, encoder frames, characters),
captured on CUDA as graphs (las.model.graphs): its per-character kernels launched at once.

The padding never reaches a real row: padded frames are masked out of the attention, padded
characters come after the real ones (the loop only looks back), and padded rows are rows of
their own (one valid frame each, so that their softmax is defined and no NaN enters a weight's
gradient). The outputs are cut back to the batch's own shape, so the loss and every gradient are
the unpadded pass's (tests/test_graphs.py on the CPU, tests/test_cuda.py on a GPU). The
teacher-forcing rate is an input on the device, not a Python branch: a graph draws its sampling
coins every step, and at rate 1 keeps every given character.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from las.model.graphs import BucketedPasses, bucket, bucket_rows
from las.model.listener import ListenerOutput
from las.model.speller import Speller

Shape = tuple[int, int, int]  # (rows, encoder frames, characters) of a bucket


def bucket_shape(rows: int, frames: int, characters: int, most_rows: int = 0) -> Shape:
    """The bucket a batch of this shape is padded to (at most `most_rows` rows, 0: unbounded)."""
    return bucket_rows(rows, most_rows), bucket(frames), bucket(characters)


def padded(memory: ListenerOutput, targets_in: torch.Tensor, shape: Shape) -> tuple[torch.Tensor, ...]:
    """The speller's inputs padded to `shape`: keys `(rows, frames, key_dim)`, values `(rows,
    frames, value_dim)`, mask `(rows, frames)`, lengths `(rows,)` and targets `(rows, characters)`."""
    rows, frames, characters = shape
    extra_rows, extra_frames = rows - len(targets_in), frames - memory.keys.shape[1]
    keys = F.pad(memory.keys, (0, 0, 0, extra_frames, 0, extra_rows))
    values = F.pad(memory.values, (0, 0, 0, extra_frames, 0, extra_rows))
    mask = F.pad(memory.mask, (0, extra_frames, 0, extra_rows))
    mask[len(targets_in) :, 0] = True  # a padded row attends to its one frame
    lengths = F.pad(memory.lengths, (0, extra_rows), value=1)
    targets = F.pad(targets_in, (0, characters - targets_in.shape[1], 0, extra_rows))
    return keys, values, mask, lengths, targets


class TeacherForcedPass(nn.Module):
    """`Speller.forward` on tensors alone, as a graph captures it; shares the speller's weights."""

    def __init__(self, speller: Speller) -> None:
        super().__init__()
        self.speller = speller

    def forward(  # type: ignore[override]
        self,
        keys: torch.Tensor,
        values: torch.Tensor,
        mask: torch.Tensor,
        lengths: torch.Tensor,
        targets_in: torch.Tensor,
        teacher_forcing: torch.Tensor,  # () on the device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = keys.new_empty(0)  # what the CTC head reads, not the speller
        return self.speller(ListenerOutput(keys, values, mask, lengths, hidden), targets_in, teacher_forcing)


class GraphedSpeller:
    """Call as the speller in training (`LAS.forward`'s `spell`): logits `(batch, steps,
    vocabulary)` and attention `(batch, steps, frames)` of `targets_in`, from the pass of the
    batch's bucket. With `capture` (CUDA), each bucket's pass is a CUDA graph, captured the first
    time the bucket comes; without, the padded pass runs as it is (what the graph holds)."""

    def __init__(self, speller: Speller, capture: bool, most_rows: int = 0) -> None:
        self.speller = speller
        self.most_rows = most_rows  # rows of the largest batch (0: unbounded)
        self.passes = BucketedPasses(lambda: TeacherForcedPass(speller), capture)

    def __call__(
        self, memory: ListenerOutput, targets_in: torch.Tensor, teacher_forcing: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        (rows, steps), frames = targets_in.shape, memory.keys.shape[1]
        shape = bucket_shape(rows, frames, steps, self.most_rows)
        # Filled on the device: a blocking copy from the host would wait for the GPU to catch up.
        forcing = torch.full((), float(teacher_forcing), device=targets_in.device)
        inputs = (*padded(memory, targets_in, shape), forcing)
        logits, attention = self.passes(shape, inputs)
        return logits[:rows, :steps], attention[:rows, :steps, :frames]
