"""Attentions that can only move forward: Gaussian-mixture location attention (Graves 2013) and
monotonic attention (Raffel et al. 2017), with a soft chunk (MoChA, Chiu & Raffel 2018).

Content-based attention may jump back or loop, and loses its place on inputs much longer than
those it was trained on. These keep a position that only advances — the mixture means, or the
frame last selected — carried from step to step as the speller's `history`, so beam search
reorders it with the rest of a row's state.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional

from las.model.attention import Attention


class GMMAttention(Attention):
    """Graves 2013: `mixtures` Gaussians over the encoder frames, each moved forward every step
    by an offset predicted from the query, κ_t = κ_{t-1} + Δ_t; the weights are the mixture's
    density, normalised over the valid frames. Content-free: the keys are not read. `softplus`
    (Battenberg et al. 2019, V2): Δ and the widths through softplus, mixture weights through a
    softmax; else Graves's exponentials."""

    def __init__(self, key_dim: int, temperature: float = 1.0, mixtures: int = 5, softplus: bool = True, **_: int):
        super().__init__(temperature)
        self.mixtures, self.softplus = mixtures, softplus
        self.parameters_of = nn.Linear(key_dim, 3 * mixtures)  # mixture weights, widths, offsets

    def initial_history(self, uniform: torch.Tensor) -> torch.Tensor:
        return uniform.new_zeros(uniform.shape[0], self.mixtures)  # every mean at the first frame

    def attend(
        self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, history: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        mixture, width, offset = self.parameters_of(query).float().chunk(3, dim=-1)  # (batch, mixtures) each
        if self.softplus:
            positions = history + functional.softplus(offset)
            spread = functional.softplus(width) + 1e-3  # standard deviations, in frames
            log_weights = mixture.log_softmax(dim=-1) - spread.log()
            sharpness = 0.5 / spread**2
        else:
            positions = history + offset.exp()
            log_weights, sharpness = mixture, width.exp()
        frames = torch.arange(mask.shape[1], device=mask.device, dtype=positions.dtype)
        density = log_weights[:, :, None] - sharpness[:, :, None] * (frames[None, None, :] - positions[:, :, None]) ** 2
        scores = density.logsumexp(dim=1) / self.temperature  # (batch, frames): log of the mixture's density
        weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1).to(values.dtype)
        context = torch.bmm(weights[:, None, :], values).squeeze(1)
        return context, weights, positions

    def forward(self, query, keys, values, mask, previous_weights):  # type: ignore[no-untyped-def]
        return self.attend(query, keys, values, mask, previous_weights)[:2]


class MonotonicAttention(Attention):
    """Raffel et al. 2017: scanning forward from the frame attended last, each frame is selected
    with probability p = σ(w·tanh(q + k) + r). Training uses the expected alignment
    α_i(j) = p_i(j) Σ_{k<=j} α_{i-1}(k) Π_{k<=l<j} (1 - p_i(l)), in closed form with running sums
    in log space (stable where a product of many (1 - p) underflows); decoding selects the first
    frame at or after the last one with p >= 0.5 and attends to it alone — or, with `chunk` > 1
    (MoChA), softly to the `chunk` frames ending there. Where no frame is selected the context is
    zero and the position stays."""

    def __init__(self, key_dim: int, temperature: float = 1.0, chunk: int = 1, noise: float = 1.0, **_: int):
        super().__init__(temperature)
        self.noise = noise
        self.selection = nn.Linear(key_dim, 1, bias=False)
        self.offset = nn.Parameter(torch.tensor(-4.0))  # r: selection starts unlikely (Chiu & Raffel)
        self.chunk_energy = nn.Linear(key_dim, 1, bias=False) if chunk > 1 else None
        self.chunk_energy_width = chunk

    def initial_history(self, uniform: torch.Tensor) -> torch.Tensor:
        start = torch.zeros_like(uniform)
        start[:, 0] = 1.0  # α_0: at the first frame
        return start

    def attend(
        self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, history: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        energy = self.selection(torch.tanh(keys + query[:, None, :])).squeeze(2).float() + self.offset
        if self.training and self.noise > 0:  # pushes selections towards 0 or 1 (Raffel et al.)
            energy = energy + self.noise * torch.randn_like(energy)
        energy = energy / self.temperature
        if self.training:
            alignment = expected_alignment(energy, history.float(), mask)
            position = alignment
        else:
            alignment, position = hard_alignment(energy, history, mask)
        weights = alignment if self.chunk_energy is None else self.spread(keys, query, alignment, mask)
        weights = weights.to(values.dtype)
        context = torch.bmm(weights[:, None, :], values).squeeze(1)
        return context, weights, position.to(history.dtype)

    def spread(
        self, keys: torch.Tensor, query: torch.Tensor, alignment: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """MoChA's weights `(batch, frames)`: each selected frame's probability shared by a softmax
        of the chunk energies over the `chunk` frames ending there."""
        assert self.chunk_energy is not None
        energy = self.chunk_energy(torch.tanh(keys + query[:, None, :])).squeeze(2).float()
        energy = energy.masked_fill(~mask, float("-inf"))
        scale = energy.max(dim=1, keepdim=True).values.clamp(min=-1e4)
        exp = (energy - scale).exp()  # (batch, frames), 0 on padding
        chunk = self.chunk_energy_width
        denominators = moving_sum(exp, chunk, backward=True).clamp(min=1e-30)  # Σ over j-w+1 .. j
        return exp * moving_sum(alignment / denominators, chunk, backward=False)  # Σ over k .. k+w-1

    def forward(self, query, keys, values, mask, previous_weights):  # type: ignore[no-untyped-def]
        return self.attend(query, keys, values, mask, previous_weights)[:2]


class MonotonicChunkAttention(MonotonicAttention):
    """MoChA (Chiu & Raffel 2018): monotonic attention with a soft chunk of `chunk_size` frames."""

    def __init__(self, key_dim: int, temperature: float = 1.0, chunk_size: int = 4, **options: float):
        super().__init__(key_dim, temperature, chunk=chunk_size, **options)


def expected_alignment(energy: torch.Tensor, previous: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """α_i `(batch, frames)` from the selection energies `(batch, frames)` and α_{i-1}: with
    L(j) = Σ_{l<j} log(1 - p(l)), α_i(j) = p(j) exp(L(j)) Σ_{k<=j} α_{i-1}(k) exp(-L(k)).
    float64, since L runs to large negative sums."""
    energy = energy.double().masked_fill(~mask, float("-inf"))  # p = 0 on padding: nothing is selected there
    stay = functional.logsigmoid(-energy)  # log(1 - p), 0 on padding
    skipped = torch.nn.functional.pad(stay.cumsum(dim=1), (1, 0))[:, :-1]  # L(j), exclusive
    # log α_{i-1}, with 0 (underflowed, or padding) as 1e-300: a running log-sum-exp that starts
    # at -inf has a NaN gradient, and α_i is 0 on padding anyway (p = 0 there)
    logged = previous.double().clamp(min=1e-300).log()
    arrived = (logged - skipped).logcumsumexp(dim=1) + skipped
    return (functional.logsigmoid(energy) + arrived).exp().float()


def hard_alignment(
    energy: torch.Tensor, previous: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One-hot weights on the first frame at or after the previously selected one (the position
    `previous` marks) whose selection probability is at least 0.5, zero where there is none; and
    the position after this step."""
    frames = torch.arange(energy.shape[1], device=energy.device)[None, :]
    last = previous.argmax(dim=1, keepdim=True)  # (batch, 1)
    candidates = (energy >= 0) & (frames >= last) & mask  # σ(e) >= 0.5
    chosen = candidates.int().argmax(dim=1, keepdim=True)  # the first candidate (0 when there is none)
    found = candidates.any(dim=1, keepdim=True)
    selected = (frames == chosen) & found
    position = torch.where(found, selected.to(previous.dtype), previous)
    return selected.float(), position


def moving_sum(values: torch.Tensor, width: int, backward: bool) -> torch.Tensor:
    """Sums over windows of `width` frames `(batch, frames)`: ending at each frame (backward) or
    starting there."""
    padding = (width - 1, 0) if backward else (0, width - 1)
    windows = functional.pad(values, padding).unfold(dimension=1, size=width, step=1)  # (batch, frames, width)
    return windows.sum(dim=2)
