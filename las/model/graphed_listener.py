"""The pyramid BLSTM listener's pass in shape buckets of (rows, frames), captured on CUDA as
graphs (las.model.graphs): cuDNN's LSTM backward launches two kernels per frame and direction,
about 2,200 per AN4 step, and they leave the GPU idle as the speller's characters did.

The padding never reaches a real output: each BLSTM direction reads an utterance's own frames
before any padding (las.model.listener.BidirectionalLSTM), padded frames are zeroed after every
layer, and padded rows are rows of their own. The frames of a bucket are a multiple of the
pyramid's reduction, so the outputs cut back to the batch's encoder frames are the unpadded
pass's, and so are the loss and every gradient (tests/test_graphs.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from las.model.graphs import QUANTUM, BucketedPasses, bucket, bucket_rows
from las.model.listener import Listener, ListenerOutput, length_mask


class ListeningPass(nn.Module):
    """`Listener.forward` with tensors out, as a graph captures it; shares the listener's weights."""

    def __init__(self, listener: Listener) -> None:
        super().__init__()
        self.listener = listener

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        memory = self.listener(features, lengths)
        return memory.keys, memory.values, memory.hidden


class GraphedListener:
    """Call as the listener in training (`LAS.forward`'s `listen`): the `ListenerOutput` of
    `features` `(batch, frames, input_size)` with `lengths` `(batch,)`, from the pass of the batch's
    bucket; with `capture` (CUDA), a CUDA graph per bucket, captured the first time it comes."""

    def __init__(self, listener: Listener, capture: bool, most_rows: int = 0) -> None:
        self.listener = listener
        self.most_rows = most_rows  # rows of the largest batch (0: unbounded)
        # A rung of input frames is a rung of encoder frames times the pyramid's reduction.
        self.reduction = listener.reduction
        self.passes = BucketedPasses(lambda: ListeningPass(listener), capture)

    def __call__(self, features: torch.Tensor, lengths: torch.Tensor) -> ListenerOutput:
        rows, frames = features.shape[:2]
        lengths = lengths.to(features.device, non_blocking=True)  # training keeps them on the host
        shape = bucket_rows(rows, self.most_rows), bucket(frames, quantum=QUANTUM * self.reduction)
        extra_rows, extra_frames = shape[0] - rows, shape[1] - frames
        inputs = F.pad(features, (0, 0, 0, extra_frames, 0, extra_rows)), F.pad(lengths, (0, extra_rows), value=1)
        keys, values, hidden = self.passes(shape, inputs)
        encoder_frames, encoder_lengths = self.listener.reduced(frames), self.listener.reduced(lengths)
        return ListenerOutput(
            keys[:rows, :encoder_frames],
            values[:rows, :encoder_frames],
            length_mask(encoder_lengths, encoder_frames),
            encoder_lengths,
            hidden[:rows, :encoder_frames],
        )
