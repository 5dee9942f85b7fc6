"""The LSTM speller's teacher-forced pass in shape buckets, captured on CUDA as graphs.

On a GPU each output character is one Python step of a handful of small kernels (the cells, the
attention, the read-out), launched one by one, and the GPU idles between them (#28: AN4 trained
at 8.6 s per epoch on an H100, 4x two CPU cores). A CUDA graph launches a whole captured sequence
of kernels at once, but only for the shapes it was captured with. So each batch is padded up to
a bucket of (rows, encoder frames, characters), and each bucket's forward and backward through
the speller is captured once (`torch.cuda.make_graphed_callables`) and replayed for every batch
of that shape, as NVIDIA's MLPerf RNN-T training captures its LSTMs per length bucket.

The padding never reaches a real row: padded frames are masked out of the attention, padded
characters come after the real ones (the loop only looks back), and padded rows are rows of
their own (one valid frame each, so that their softmax is defined and no NaN enters a weight's
gradient). The outputs are cut back to the batch's own shape, so the loss and every gradient are
the unpadded pass's (tests/test_graphed_speller.py on the CPU, tests/test_cuda.py on a GPU). The
teacher-forcing rate is an input on the device, not a Python branch: a graph draws its sampling
coins every step, and at rate 1 keeps every given character.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from las.model.listener import ListenerOutput
from las.model.speller import Speller

Shape = tuple[int, int, int]  # (rows, encoder frames, characters) of a bucket
# Rungs of the frame and character ladders grow by this much (each a multiple of QUANTUM): at most
# 25% padding per dimension, and about 17 rungs up to a 25 s utterance's 625 encoder frames.
RATIO = 1.25
QUANTUM = 8


def bucket(size: int, ratio: float = RATIO, quantum: int = QUANTUM) -> int:
    """The smallest rung of the ladder `quantum`, then each rung `ratio` times the last rounded up
    to a multiple of `quantum`, that holds `size`."""
    rung = quantum
    while rung < size:
        rung = quantum * math.ceil(rung * ratio / quantum)
    return rung


def bucket_shape(rows: int, frames: int, characters: int, most_rows: int = 0) -> Shape:
    """The bucket a batch of this shape is padded to; never more rows than a batch can have
    (`most_rows`, 0 for no bound): batches by count are all full but the last."""
    rows_bucket = bucket(rows, quantum=1)
    return min(rows_bucket, most_rows or rows_bucket), bucket(frames), bucket(characters)


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
        self.capture = capture
        self.most_rows = most_rows  # rows of the largest batch (0: unbounded)
        self.passes: dict[Shape, Callable[..., tuple[torch.Tensor, torch.Tensor]]] = {}

    def __call__(
        self, memory: ListenerOutput, targets_in: torch.Tensor, teacher_forcing: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        (rows, steps), frames = targets_in.shape, memory.keys.shape[1]
        shape = bucket_shape(rows, frames, steps, self.most_rows)
        inputs = (*padded(memory, targets_in, shape), torch.tensor(float(teacher_forcing), device=targets_in.device))
        if shape not in self.passes:
            self.passes[shape] = self.captured(inputs) if self.capture else TeacherForcedPass(self.speller)
        logits, attention = self.passes[shape](*inputs)
        return logits[:rows, :steps], attention[:rows, :steps, :frames]

    def captured(self, inputs: tuple[torch.Tensor, ...]) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
        """The pass for the shape of `inputs`, captured with copies of them. Its warm-up passes
        draw random numbers; forking the generators puts them back, so that a run draws the same
        numbers whenever its graphs were captured (a resumed run captures anew)."""
        sample = tuple(item.detach().clone().requires_grad_(item.requires_grad) for item in inputs)
        device = inputs[0].device
        with torch.random.fork_rng(devices=[device]):
            return torch.cuda.make_graphed_callables(TeacherForcedPass(self.speller), sample, allow_unused_input=True)
