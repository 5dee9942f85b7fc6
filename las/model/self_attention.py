"""Self-attention's building blocks (Vaswani et al. 2017; the Conformer's, Gulati et al. 2020):
multi-head attention, sinusoidal positions, the feed-forward and convolution modules, and the
encoder layer both self-attention listeners stack.

Every module takes a mask of the frames it may read and leaves padding out of every sum: a
padded batch gives each utterance exactly the outputs it has alone (tests/test_self_attention.py).
Layers normalise before each sublayer (pre-norm), which trains without the post-norm's
sensitivity to the warm-up (Xiong et al. 2020).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional


def sinusoidal_positions(positions: torch.Tensor, dim: int) -> torch.Tensor:
    """Vaswani et al.'s encodings `(..., dim)` of integer `positions` `(...)`: sines and cosines of
    geometrically spaced wavelengths. Computed for any length, so nothing caps an utterance."""
    frequencies = torch.exp(
        torch.arange(0, dim, 2, device=positions.device, dtype=torch.float32) * (-math.log(10000.0) / dim)
    )  # (dim / 2,)
    angles = positions.float()[..., None] * frequencies  # (..., dim / 2)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)[..., :dim]


class MultiHeadAttention(nn.Module):
    """Scaled dot-product attention in `heads` heads of `dim / heads`. Keys and values may come
    in other sizes (`key_dim`, `value_dim`: the listener's heads, for the speller's cross-attention)."""

    def __init__(self, dim: int, heads: int, dropout: float, key_dim: int | None = None, value_dim: int | None = None):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(key_dim or dim, dim)
        self.value = nn.Linear(value_dim or dim, dim)
        self.output = nn.Linear(dim, dim)

    def split(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, frames, dim) -> (batch, heads, frames, dim / heads)"""
        batch, frames, dim = x.shape
        return x.reshape(batch, frames, self.heads, dim // self.heads).transpose(1, 2)

    def project(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values `(batch, frames, key_dim | value_dim)` as the heads read them `(batch,
        heads, frames, dim / heads)`: what incremental decoding keeps instead of recomputing."""
        return self.split(self.key(keys)), self.split(self.value(values))

    def attend(
        self,
        query: torch.Tensor,  # (batch, queries, dim), not yet projected
        keys: torch.Tensor,  # (batch, heads, frames, dim / heads), projected
        values: torch.Tensor,  # (batch, heads, frames, dim / heads), projected
        mask: torch.Tensor | None,  # (batch | 1, queries | 1, frames) bool, True where it may look
        with_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Output `(batch, queries, dim)` and, `with_weights`, the weights averaged over the heads
        `(batch, queries, frames)` (what plots, word times and the attention window read)."""
        dropout = self.dropout if self.training else 0.0
        heads_mask = None if mask is None else mask[:, None]
        query = self.split(self.query(query))
        if with_weights:
            scores = query @ keys.transpose(2, 3) / math.sqrt(query.shape[-1])  # (batch, heads, queries, frames)
            if heads_mask is not None:
                scores = scores.masked_fill(~heads_mask, float("-inf"))
            weights = torch.softmax(scores, dim=-1)
            mixed = functional.dropout(weights, dropout, self.training) @ values
            average = weights.mean(dim=1)
        else:  # fused kernels where the weights are not wanted
            mixed = functional.scaled_dot_product_attention(query, keys, values, heads_mask, dropout)
            average = None
        batch, heads, queries, size = mixed.shape
        return self.output(mixed.transpose(1, 2).reshape(batch, queries, heads * size)), average

    def forward(
        self, query: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None, with_weights: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`query` `(batch, queries, dim)` attending to `memory` `(batch, frames, dim)`."""
        return self.attend(query, *self.project(memory, memory), mask, with_weights)


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden: int, dropout: float, activation: type[nn.Module] = nn.ReLU) -> None:
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(dim, hidden), activation(), nn.Dropout(dropout), nn.Linear(hidden, dim), nn.Dropout(dropout)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


class ConvolutionModule(nn.Module):
    """The Conformer's: a gated pointwise convolution, a depthwise convolution over time, and a
    pointwise one. Layer normalisation where the paper has batch normalisation: batch statistics
    would mix the utterances of a batch and the padding into each one's output."""

    def __init__(self, dim: int, kernel: int, dropout: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.gated = nn.Linear(dim, 2 * dim)  # a pointwise convolution is a linear map per frame
        self.depthwise = nn.Conv1d(dim, dim, kernel, padding=kernel // 2, groups=dim)
        self.depthwise_norm = nn.LayerNorm(dim)
        self.pointwise = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # x: (batch, frames, dim); mask: (batch, frames), True at valid frames
        x = functional.glu(self.gated(self.norm(x)), dim=-1) * mask[:, :, None]  # padding reads as zeros
        x = self.depthwise(x.transpose(1, 2)).transpose(1, 2)
        return self.dropout(self.pointwise(functional.silu(self.depthwise_norm(x))))


class EncoderLayer(nn.Module):
    """A Transformer encoder layer (self-attention, feed-forward), or with a `convolution_kernel`
    a Conformer block: half a feed-forward, self-attention, the convolution module, half a
    feed-forward (the macaron arrangement), then a layer normalisation."""

    def __init__(self, dim: int, heads: int, feedforward: int, dropout: float, convolution_kernel: int = 0) -> None:
        super().__init__()
        self.conformer = convolution_kernel > 0
        activation = nn.SiLU if self.conformer else nn.ReLU
        self.attention_norm = nn.LayerNorm(dim)
        self.attention = MultiHeadAttention(dim, heads, dropout)
        self.feedforward_norm = nn.LayerNorm(dim)
        self.feedforward = FeedForward(dim, feedforward, dropout, activation)
        self.dropout = nn.Dropout(dropout)
        if self.conformer:
            self.first_feedforward_norm = nn.LayerNorm(dim)
            self.first_feedforward = FeedForward(dim, feedforward, dropout, activation)
            self.convolution = ConvolutionModule(dim, convolution_kernel, dropout)
            self.final_norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        # x: (batch, frames, dim); mask: (batch, frames), True at valid frames
        half = 0.5 if self.conformer else 1.0
        if self.conformer:
            x = x + half * self.first_feedforward(self.first_feedforward_norm(x))
        attended = self.attention_norm(x)
        x = x + self.dropout(self.attention(attended, attended, mask[:, None, :])[0])
        if self.conformer:
            x = x + self.convolution(x, mask)
        x = x + half * self.feedforward(self.feedforward_norm(x))
        return self.final_norm(x) if self.conformer else x
