"""The listener: input frames stacked (optionally), a BLSTM, then pyramidal BLSTMs that halve the
time axis, then key/value heads."""

from __future__ import annotations

from typing import NamedTuple, TypeVar

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def length_mask(lengths: torch.Tensor, frames: int) -> torch.Tensor:
    """`(batch, frames)` boolean mask, True at valid positions."""
    return torch.arange(frames, device=lengths.device) < lengths[:, None]


def reverse_within_lengths(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse each sequence of `x` (batch, frames, dim) over its own length, leaving padding in place."""
    batch, frames = x.shape[:2]
    positions = torch.arange(frames, device=x.device)[None, :]  # (1, frames)
    lengths = lengths.to(x.device)[:, None]
    source = torch.where(positions < lengths, lengths - 1 - positions, positions)  # (batch, frames)
    # Whole frames as rows of one matrix: a row copy per frame, and in the backward pass a row
    # sum, where a gather and its scatter go element by element (2.5x the time).
    rows = (source + torch.arange(batch, device=x.device)[:, None] * frames).reshape(-1)
    return x.reshape(batch * frames, -1).index_select(0, rows).reshape(x.shape)


class BidirectionalLSTM(nn.Module):
    """A BLSTM as two unidirectional LSTMs, the backward one reading each sequence reversed in place.

    Both directions then read valid frames before padding, so a padded batch gives exactly the
    outputs of a packed one at valid positions, and the padded path is the faster on both devices
    (docs/archive/experiments.md): on the CPU several times in the backward pass, because PyTorch's packed
    CPU kernel runs one small matrix product per time step and batch size; on an H100 1.19x per
    training step, because packing and unpacking add a third more kernel launches to a step that
    launches, not computes, and length-bucketed batches leave little padding to skip.
    """

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.packed = False  # benchmarks and tests force either path
        self.forward_lstm = nn.LSTM(input_size, hidden_size, batch_first=True)
        self.backward_lstm = nn.LSTM(input_size, hidden_size, batch_first=True)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        # x: (batch, frames, input_size) -> (batch, frames, 2 * hidden_size), zero on padding
        reversed_x = reverse_within_lengths(x, lengths)
        forward = self._run(self.forward_lstm, x, lengths, self.packed)
        backward = reverse_within_lengths(self._run(self.backward_lstm, reversed_x, lengths, self.packed), lengths)
        output = torch.cat([forward, backward], dim=-1)
        return output * length_mask(lengths.to(x.device), x.shape[1])[:, :, None]

    @staticmethod
    def _run(lstm: nn.LSTM, x: torch.Tensor, lengths: torch.Tensor, packed: bool) -> torch.Tensor:
        if not packed:
            return lstm(x)[0]
        sequence = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
        return pad_packed_sequence(lstm(sequence)[0], batch_first=True, total_length=x.shape[1])[0]


class LockedDropout(nn.Module):
    """Variational dropout (Gal & Ghahramani 2016): one mask per sequence and feature, shared by
    every frame, so a recurrent layer sees the same units dropped all along the utterance."""

    def __init__(self, probability: float) -> None:
        super().__init__()
        self.probability = probability

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: (batch, frames, features)
        if not self.training or self.probability == 0:
            return x
        keep = x.new_empty(x.shape[0], 1, x.shape[2]).bernoulli_(1 - self.probability)
        return x * keep / (1 - self.probability)


class ListenerOutput(NamedTuple):
    keys: torch.Tensor  # (batch, encoder_frames, key_dim)
    values: torch.Tensor  # (batch, encoder_frames, value_dim)
    mask: torch.Tensor  # (batch, encoder_frames) bool, True at valid frames
    lengths: torch.Tensor  # (batch,) encoder frames per utterance
    hidden: torch.Tensor  # (batch, encoder_frames, 2 * hidden): what the CTC head reads

    def select(self, indices: torch.Tensor) -> ListenerOutput:
        """Rows `indices` of every field: beam search repeats each utterance once per hypothesis."""
        return ListenerOutput(*(field.index_select(0, indices.to(field.device)) for field in self))


LengthsOrFrames = TypeVar("LengthsOrFrames", torch.Tensor, int)


def halve_lengths(lengths: LengthsOrFrames) -> LengthsOrFrames:
    """Lengths after one pyramid layer: an odd last frame is paired with a zero frame, not dropped."""
    return stacked_lengths(lengths, 2)


def stacked_lengths(lengths: LengthsOrFrames, stacking: int) -> LengthsOrFrames:
    """Lengths after `stacking` frames become one: a last group short of frames is filled with zeros."""
    return (lengths + stacking - 1) // stacking


def stack_frames(x: torch.Tensor, stacking: int) -> torch.Tensor:
    """`(batch, frames, size)` -> `(batch, ceil(frames / stacking), stacking * size)`: each group of
    `stacking` consecutive frames side by side, the last group filled with zero frames (padded by
    the remainder, not under an `if`: one graph for every length, las.export.writer)."""
    x = nn.functional.pad(x, (0, 0, 0, -x.shape[1] % stacking))
    batch, frames, size = x.shape
    return x.reshape(batch, frames // stacking, stacking * size)


class Listener(nn.Module):
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        pyramid_layers: int,
        key_dim: int,
        value_dim: int,
        dropout: float,
        locked_dropout: bool = False,
        stacking: int = 1,
    ) -> None:
        super().__init__()
        # `stacking` input frames side by side make one frame of the first BLSTM: that many times
        # fewer steps for the layer that runs at the frame rate, the costliest of the listener.
        self.stacking = stacking
        self.input_layer = BidirectionalLSTM(stacking * input_size, hidden_size)
        # Each pyramid layer reads two adjacent frames concatenated: 2 frames x 2 directions.
        self.pyramid = nn.ModuleList(BidirectionalLSTM(4 * hidden_size, hidden_size) for _ in range(pyramid_layers))
        self.dropout = LockedDropout(dropout) if locked_dropout else nn.Dropout(dropout)
        self.key = nn.Linear(2 * hidden_size, key_dim)
        self.value = nn.Linear(2 * hidden_size, value_dim)
        self.input_size, self.output_size = input_size, 2 * hidden_size

    @property
    def reduction(self) -> int:
        """Input frames per encoder frame."""
        return self.stacking * 2 ** len(self.pyramid)

    def reduced(self, lengths: LengthsOrFrames) -> LengthsOrFrames:
        """Encoder frames of utterances of `lengths` frames (a tensor, or a count)."""
        lengths = stacked_lengths(lengths, self.stacking)
        for _ in self.pyramid:
            lengths = halve_lengths(lengths)
        return lengths

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> ListenerOutput:
        # features: (batch, frames, input_size); lengths: (batch,)
        # Once, without waiting: each BLSTM reads them, and a blocking copy waits for the GPU.
        lengths = lengths.to(features.device, non_blocking=True)
        if self.stacking > 1:  # a last group short of frames is filled with zeros, not with the padding
            features = stack_frames(features * length_mask(lengths, features.shape[1])[:, :, None], self.stacking)
            lengths = stacked_lengths(lengths, self.stacking)  # features: (batch, frames / stacking, stacking * size)
        x = self.input_layer(features, lengths)  # (batch, frames / stacking, 2H), zero on padding
        for layer in self.pyramid:
            x, lengths = self.dropout(x), halve_lengths(lengths)
            # A zero frame to pair with an odd last one; padding by the parity, not under an `if`,
            # keeps the graph one for every length (las.export.writer).
            x = nn.functional.pad(x, (0, 0, 0, x.shape[1] % 2))
            batch, frames, size = x.shape
            x = layer(x.reshape(batch, frames // 2, 2 * size), lengths)  # (batch, frames / 2, 2H)
        x = self.dropout(x)
        return ListenerOutput(self.key(x), self.value(x), length_mask(lengths, x.shape[1]), lengths, x)
