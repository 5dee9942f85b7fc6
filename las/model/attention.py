"""Attention variants behind one interface, and the registry that names them in the config.

Every variant maps a query, the listener's keys and values, the padding mask and the previous
step's weights to `(context, weights)`; the weights are exactly zero on padding. State (the
previous weights) is passed in and returned, never kept on the module, so that beam search can
reorder it like any other tensor.

Keys come out of the listener's key head and queries out of the speller's query head, both of
`key_dim`: the linear maps of the additive forms (Bahdanau's W·h and V·s) live in those heads.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional


class Attention(nn.Module):
    """Scores divided by `temperature` before the softmax: above 1 smooths the weights, below 1
    sharpens them (Chorowski et al. 2015 discuss both).

    The speller calls `attend`, which also returns what the next step reads as `history`: the
    weights, or with `cumulative` their running sum (Chorowski's cumulative location term);
    attentions with a state of their own (las.model.monotonic: GMM, monotonic, MoChA) return that instead."""

    cumulative = False  # set by the speller (model.cumulative_attention)

    def __init__(self, temperature: float = 1.0) -> None:
        super().__init__()
        self.temperature = temperature

    def initial_history(self, uniform: torch.Tensor) -> torch.Tensor:
        """What the first step reads, given uniform weights over the valid frames `(batch, frames)`."""
        return torch.zeros_like(uniform) if self.cumulative else uniform

    def attend(
        self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, history: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Context `(batch, value_dim)`, weights `(batch, frames)`, and the next step's history."""
        context, weights = self(query, keys, values, mask, history)
        return context, weights, history + weights if self.cumulative else weights

    def forward(
        self,
        query: torch.Tensor,  # (batch, key_dim)
        keys: torch.Tensor,  # (batch, frames, key_dim)
        values: torch.Tensor,  # (batch, frames, value_dim)
        mask: torch.Tensor,  # (batch, frames) bool, True at valid frames
        previous_weights: torch.Tensor,  # (batch, frames)
    ) -> tuple[torch.Tensor, torch.Tensor]:  # context (batch, value_dim), weights (batch, frames)
        scores = self.score(query, keys, previous_weights) / self.temperature
        scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        context = torch.bmm(weights[:, None, :], values).squeeze(1)
        return context, weights

    def score(self, query: torch.Tensor, keys: torch.Tensor, previous_weights: torch.Tensor) -> torch.Tensor:
        """Unnormalised scores `(batch, frames)`, up to a constant per row."""
        raise NotImplementedError


class DotAttention(Attention):
    """Luong et al. 2015: score = q·k."""

    def __init__(self, key_dim: int, temperature: float = 1.0, **_: int) -> None:
        super().__init__(temperature)

    def score(self, query: torch.Tensor, keys: torch.Tensor, previous_weights: torch.Tensor) -> torch.Tensor:
        return torch.bmm(keys, query[:, :, None]).squeeze(2)


class ScaledDotAttention(DotAttention):
    """Vaswani et al. 2017: score = q·k / sqrt(d), keeping the softmax out of saturation."""

    def __init__(self, key_dim: int, temperature: float = 1.0, **_: int) -> None:
        super().__init__(key_dim, temperature)
        self.scale = 1.0 / math.sqrt(key_dim)

    def score(self, query: torch.Tensor, keys: torch.Tensor, previous_weights: torch.Tensor) -> torch.Tensor:
        return super().score(query, keys, previous_weights) * self.scale


class GeneralAttention(Attention):
    """Luong et al. 2015, "general" (bilinear): score = (W·q)·k."""

    def __init__(self, key_dim: int, temperature: float = 1.0, **_: int) -> None:
        super().__init__(temperature)
        self.bilinear = nn.Linear(key_dim, key_dim, bias=False)

    def score(self, query: torch.Tensor, keys: torch.Tensor, previous_weights: torch.Tensor) -> torch.Tensor:
        return torch.bmm(keys, self.bilinear(query)[:, :, None]).squeeze(2)


class AdditiveAttention(Attention):
    """Bahdanau et al. 2015: score = w·tanh(q + k)."""

    def __init__(self, key_dim: int, temperature: float = 1.0, **_: int) -> None:
        super().__init__(temperature)
        self.energy = nn.Linear(key_dim, 1, bias=False)

    def score(self, query: torch.Tensor, keys: torch.Tensor, previous_weights: torch.Tensor) -> torch.Tensor:
        return self.energies(torch.add(keys, query[:, None, :]).mul_(2))

    def energies(self, doubled: torch.Tensor) -> torch.Tensor:
        """w·tanh(u) `(batch, frames)` from 2u `(batch, frames, key_dim)`, less Σw: a constant per
        row, which the softmax over frames ignores (weights and gradients are the same). Since
        w·tanh(u) = 2 w·σ(2u) - Σw, and PyTorch's CPU tanh takes 3-7x its sigmoid's time, this is
        the speller's widest operation at a third of the cost. In place: 2u is not kept."""
        if torch.onnx.is_in_onnx_export():  # ONNX Runtime runs a product with a vector row by row
            rows, frames, size = doubled.shape
            return (doubled.sigmoid().reshape(rows * frames, size) @ (2 * self.energy.weight.t())).reshape(rows, frames)
        return doubled.sigmoid_() @ (2 * self.energy.weight[0])


class LocationAwareAttention(AdditiveAttention):
    """Chorowski et al. 2015: score = w·tanh(q + k + U·(F * previous weights)).

    The convolution over the previous alignment tells each frame where attention just was, which
    favours moving forward monotonically: alignments form in far fewer epochs on small corpora.
    """

    def __init__(
        self,
        key_dim: int,
        temperature: float = 1.0,
        location_channels: int = 10,
        location_kernel: int = 15,
        **_: int,
    ) -> None:
        super().__init__(key_dim, temperature)
        self.convolution = nn.Conv1d(1, location_channels, location_kernel, padding=location_kernel // 2, bias=False)
        self.projection = nn.Linear(location_channels, key_dim, bias=False)

    def score(self, query: torch.Tensor, keys: torch.Tensor, previous_weights: torch.Tensor) -> torch.Tensor:
        # The convolution F and projection U are both linear: U·(F * w) is one filter of `kernel`
        # taps per key dimension over windows of w. With a column of ones beside the windows and
        # the query beside the filter, 2(k + q + U·(F * w)) is a single batched product.
        kernel = self.convolution.kernel_size[0]
        padded = functional.pad(previous_weights, (kernel // 2, kernel - 1 - kernel // 2))
        taps = (self.projection.weight @ self.convolution.weight[:, 0, :]).t()  # (kernel, key_dim)
        if torch.onnx.is_in_onnx_export():
            # ONNX has no unfold of a length known only at run time, and ONNX Runtime's batched
            # products of per-row coefficients are slow: shifted slices, and one shared product.
            frames = previous_weights.shape[1]
            windows = torch.stack([padded[:, tap : tap + frames] for tap in range(kernel)], dim=2)
            return self.energies(2 * (keys + windows @ taps + query[:, None, :]))
        windows = padded.unfold(1, kernel, 1)  # (batch, frames, kernel)
        windows = torch.cat([windows, windows.new_ones(windows.shape[:2] + (1,))], dim=2)
        coefficients = torch.cat(
            [taps.expand(query.shape[0], -1, -1), query[:, None, :]], dim=1
        )  # (batch, kernel + 1, key_dim)
        return self.energies(torch.baddbmm(keys, windows, coefficients, beta=2, alpha=2))


class MultiHeadAttention(Attention):
    """Several attentions of one kind (Vaswani et al. 2017), each on its own slice of the query,
    keys and values; contexts are concatenated and weights averaged (what plots and the next
    step's location term read). With one head it is exactly the single-head attention."""

    def __init__(self, kind: type[Attention], heads: int, key_dim: int, **options: float) -> None:
        super().__init__()
        self.heads = nn.ModuleList(kind(key_dim // heads, **options) for _ in range(heads))

    def forward(
        self,
        query: torch.Tensor,  # (batch, key_dim)
        keys: torch.Tensor,  # (batch, frames, key_dim)
        values: torch.Tensor,  # (batch, frames, value_dim)
        mask: torch.Tensor,  # (batch, frames)
        previous_weights: torch.Tensor,  # (batch, frames)
    ) -> tuple[torch.Tensor, torch.Tensor]:
        count = len(self.heads)
        slices = zip(query.chunk(count, -1), keys.chunk(count, -1), values.chunk(count, -1), strict=True)
        outputs = [head(q, k, v, mask, previous_weights) for head, (q, k, v) in zip(self.heads, slices, strict=True)]
        context = torch.cat([context for context, _ in outputs], dim=-1)  # (batch, value_dim)
        weights = torch.stack([weights for _, weights in outputs]).mean(dim=0)  # (batch, frames)
        return context, weights
