"""A listener of self-attention layers (`model.listener=transformer|conformer`): the time axis
shortened first, by frame concatenation as the pyramid does or by strided convolution, then
Transformer or Conformer layers over it, then the same key and value heads as the pBLSTM's.

Its time is matrix products over all frames at once, where a BLSTM runs frame by frame. Frames
past an utterance's length are zero after every reduction and hidden from every attention, so a
padded batch gives each utterance its unpadded outputs.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from torch import nn
from torch.nn import functional

from las.model.listener import ListenerOutput, halve_lengths, length_mask
from las.model.self_attention import EncoderLayer, sinusoidal_positions

Reduction = Literal["concat", "conv"]

CONVOLUTION_CHANNELS = 64  # of the strided convolutions: ESPnet's use d_model, at 4x this one's cost on a CPU


def zero_padding(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """`x` `(batch, frames, ...)` with the frames past each length set to zero."""
    mask = length_mask(lengths.to(x.device), x.shape[1])
    return x * mask.reshape(*mask.shape, *(1,) * (x.dim() - 2))


class ConcatenationReduction(nn.Module):
    """Each run of 2**halvings frames concatenated into one, as the pyramid pairs frames, then
    mapped to the model's width."""

    def __init__(self, input_size: int, dim: int, halvings: int) -> None:
        super().__init__()
        self.halvings = halvings
        self.projection = nn.Linear(input_size << halvings, dim)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # x: (batch, frames, input_size) -> (batch, frames / 2**halvings, dim)
        run = 1 << self.halvings
        x = functional.pad(zero_padding(x, lengths), (0, 0, 0, -x.shape[1] % run))
        batch, frames, size = x.shape
        for _ in range(self.halvings):
            lengths = halve_lengths(lengths)  # a last, short run is kept: ceil(length / 2**halvings)
        return self.projection(x.reshape(batch, frames // run, run * size)), lengths


class ConvolutionReduction(nn.Module):
    """Strided 3x3 convolutions over (time, feature), each halving both (ESPnet's and the
    Conformer's subsampling), then the channels and remaining features mapped to the model's width.
    A convolution reads a frame on each side: zeroing the padding before each keeps a short
    utterance's last frames what they are alone."""

    def __init__(self, input_size: int, dim: int, halvings: int) -> None:
        super().__init__()
        channels = [1] + [CONVOLUTION_CHANNELS] * halvings
        pairs = zip(channels, channels[1:], strict=False)
        self.convolutions = nn.ModuleList(nn.Conv2d(before, after, 3, stride=2, padding=1) for before, after in pairs)
        features = input_size
        for _ in range(halvings):
            features = (features + 1) // 2
        self.projection = nn.Linear(channels[-1] * features, dim)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # x: (batch, frames, input_size) -> (batch, frames / 2**halvings, dim)
        x = x[:, None]  # (batch, 1, frames, input_size): one channel
        for convolution in self.convolutions:
            x = zero_padding(x.transpose(1, 2), lengths).transpose(1, 2)
            x, lengths = functional.relu(convolution(x)), halve_lengths(lengths)
        batch, channels, frames, features = x.shape
        return self.projection(x.permute(0, 2, 1, 3).reshape(batch, frames, channels * features)), lengths


class AttentionListener(nn.Module):
    def __init__(
        self,
        input_size: int,
        dim: int,
        layers: int,
        heads: int,
        feedforward: int,
        halvings: int,
        reduction: Reduction,
        key_dim: int,
        value_dim: int,
        dropout: float,
        convolution_kernel: int = 0,  # > 0: Conformer blocks with this depthwise kernel
    ) -> None:
        super().__init__()
        self.input_size, self.output_size = input_size, dim
        reduce = ConcatenationReduction if reduction == "concat" else ConvolutionReduction
        self.reduction = reduce(input_size, dim, halvings)
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            EncoderLayer(dim, heads, feedforward, dropout, convolution_kernel) for _ in range(layers)
        )
        self.norm = nn.LayerNorm(dim)  # pre-norm layers leave their sum unnormalised
        self.key = nn.Linear(dim, key_dim)
        self.value = nn.Linear(dim, value_dim)

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> ListenerOutput:
        # features: (batch, frames, input_size); lengths: (batch,)
        x, lengths = self.reduction(features, lengths)  # (batch, encoder_frames, dim)
        lengths = lengths.to(x.device)
        mask = length_mask(lengths, x.shape[1])
        positions = sinusoidal_positions(torch.arange(x.shape[1], device=x.device), x.shape[2])
        x = self.dropout(x * math.sqrt(x.shape[2]) + positions.to(x.dtype))
        for layer in self.layers:
            x = layer(x, mask)
        x = self.norm(x) * mask[:, :, None]  # (batch, encoder_frames, dim), zero on padding
        return ListenerOutput(self.key(x), self.value(x), mask, lengths, x)
