"""A speller of Transformer decoder layers (`model.speller=transformer`): masked self-attention
over the characters so far, cross-attention to the listener's keys and values, a feed-forward.

Training reads every character of a batch in one pass under a causal mask, where the LSTMCell
speller takes a step per character. Decoding is incremental: a step adds one character, keeping
each layer's self-attention keys and values of the characters before it, so the one decoding
engine (las.search) drives it through the same `initial_state`, `step` and `select` as the LSTM
speller, beam search, CTC prefix scoring and LM fusion included.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import nn

from las.model.listener import ListenerOutput
from las.model.self_attention import FeedForward, MultiHeadAttention, sinusoidal_positions


class CrossMemory(NamedTuple):
    """The listener's memory as each layer's cross-attention reads it, projected once per
    utterance rather than once per character. It stands in for a `ListenerOutput` in the search:
    rows are selected and the mask narrowed (`Rules.attend`) the same way."""

    keys: tuple[torch.Tensor, ...]  # per layer (rows, heads, frames, dim / heads)
    values: tuple[torch.Tensor, ...]  # per layer (rows, heads, frames, dim / heads)
    mask: torch.Tensor  # (rows, frames) bool, True at valid frames
    lengths: torch.Tensor  # (rows,)

    def select(self, indices: torch.Tensor) -> CrossMemory:
        indices = indices.to(self.mask.device)
        return CrossMemory(
            tuple(keys.index_select(0, indices) for keys in self.keys),
            tuple(values.index_select(0, indices) for values in self.values),
            self.mask.index_select(0, indices),
            self.lengths.index_select(0, indices),
        )


class TransformerState(NamedTuple):
    """What a decoding step hands to the next: each layer's self-attention keys and values of
    every character read so far, and the step's cross-attention weights."""

    keys: tuple[torch.Tensor, ...]  # per layer (rows, heads, characters, dim / heads)
    values: tuple[torch.Tensor, ...]  # per layer (rows, heads, characters, dim / heads)
    weights: torch.Tensor  # (rows, frames): the last layer's cross-attention, averaged over heads

    def select(self, indices: torch.Tensor) -> TransformerState:
        keys = tuple(layer[indices] for layer in self.keys)
        return TransformerState(keys, tuple(layer[indices] for layer in self.values), self.weights[indices])


def empty_state(
    memory: ListenerOutput | CrossMemory, layers: int, heads: int, dim: int, dtype: torch.dtype = torch.float32
) -> TransformerState:
    """The state before the first character: no keys or values read yet, attention uniform."""
    empty = memory.mask.new_zeros((memory.mask.shape[0], heads, 0, dim // heads), dtype=dtype)
    uniform = memory.mask.float() / memory.lengths[:, None].float()  # (rows, frames)
    return TransformerState((empty,) * layers, (empty,) * layers, uniform)


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, feedforward: int, key_dim: int, value_dim: int, dropout: float) -> None:
        super().__init__()
        self.self_norm = nn.LayerNorm(dim)
        self.self_attention = MultiHeadAttention(dim, heads, dropout)
        self.cross_norm = nn.LayerNorm(dim)
        self.cross_attention = MultiHeadAttention(dim, heads, dropout, key_dim, value_dim)
        self.feedforward_norm = nn.LayerNorm(dim)
        self.feedforward = FeedForward(dim, feedforward, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,  # (batch, characters, dim)
        own: tuple[torch.Tensor, torch.Tensor],  # self-attention keys and values (batch, heads, seen, dim / heads)
        own_mask: torch.Tensor | None,  # (1, characters, seen): which characters each may read
        cross: tuple[torch.Tensor, torch.Tensor],  # cross-attention keys and values, projected
        cross_mask: torch.Tensor,  # (batch, 1, frames)
        with_weights: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Output `(batch, characters, dim)` and, `with_weights`, the cross-attention weights
        `(batch, characters, frames)`. `own` holds the keys and values of `self_inputs` already
        joined to those of earlier characters (`project_self`)."""
        x = x + self.dropout(self.self_attention.attend(self.self_norm(x), *own, own_mask)[0])
        attended, weights = self.cross_attention.attend(self.cross_norm(x), *cross, cross_mask, with_weights)
        x = x + self.dropout(attended)
        return x + self.feedforward(self.feedforward_norm(x)), weights

    def project_self(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Self-attention keys and values `(batch, heads, characters, dim / heads)` of inputs `x`."""
        normalised = self.self_norm(x)
        return self.self_attention.project(normalised, normalised)


class TransformerSpeller(nn.Module):
    def __init__(
        self,
        vocabulary_size: int,
        dim: int,
        layers: int,
        heads: int,
        feedforward: int,
        key_dim: int,
        value_dim: int,
        dropout: float,
        tie_embedding: bool,
    ) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocabulary_size, dim)
        # Scaled by sqrt(dim) in `embed`, so of unit size, as the positions and what each layer adds
        # are: PyTorch's N(0, 1) would make it sqrt(dim) times larger, and a sum that the character
        # read dominates is a language model that does not listen (docs/archive/experiments.md, "Self-attention").
        nn.init.normal_(self.embedding.weight, std=dim**-0.5)
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            DecoderLayer(dim, heads, feedforward, key_dim, value_dim, dropout) for _ in range(layers)
        )
        self.norm = nn.LayerNorm(dim)
        self.output = nn.Linear(dim, vocabulary_size)
        if tie_embedding:
            self.output.weight = self.embedding.weight
        self.attention_dimensions = (key_dim, value_dim)  # of the memory it attends to

    def prepare(self, memory: ListenerOutput | CrossMemory) -> CrossMemory:
        """Each layer's projections of the memory's keys and values."""
        if isinstance(memory, CrossMemory):
            return memory
        projected = [layer.cross_attention.project(memory.keys, memory.values) for layer in self.layers]
        return CrossMemory(
            tuple(keys for keys, _ in projected), tuple(values for _, values in projected), memory.mask, memory.lengths
        )

    def embed(self, tokens: torch.Tensor, first_position: int = 0) -> torch.Tensor:
        """`(batch, characters, dim)` inputs of the first layer from `tokens` `(batch, characters)`."""
        dim = self.embedding.embedding_dim
        positions = torch.arange(first_position, first_position + tokens.shape[1], device=tokens.device)
        embedded = self.embedding(tokens) * math.sqrt(dim)
        return self.dropout(embedded + sinusoidal_positions(positions, dim).to(embedded.dtype))

    def run(
        self, tokens: torch.Tensor, memory: CrossMemory, state: TransformerState | None
    ) -> tuple[torch.Tensor, torch.Tensor, TransformerState]:
        """Logits `(batch, characters, vocabulary)`, the last layer's cross-attention `(batch,
        characters, frames)` and the state after `tokens` `(batch, characters)`, which follow the
        characters of `state` (None: from the start)."""
        seen = 0 if state is None else state.keys[0].shape[2]
        characters = tokens.shape[1]
        x = self.embed(tokens, seen)
        # A character reads itself and those before it: row i of the mask sees columns <= seen + i.
        own_mask = None
        if characters > 1:
            rows = torch.arange(characters, device=tokens.device)[:, None] + seen
            own_mask = (torch.arange(seen + characters, device=tokens.device)[None, :] <= rows)[None]
        cross_mask = memory.mask[:, None, :]
        keys, values, weights = [], [], None
        for index, layer in enumerate(self.layers):
            new_keys, new_values = layer.project_self(x)
            if state is not None:
                new_keys = torch.cat([state.keys[index], new_keys], dim=2)
                new_values = torch.cat([state.values[index], new_values], dim=2)
            keys.append(new_keys)
            values.append(new_values)
            last = index == len(self.layers) - 1
            cross = (memory.keys[index], memory.values[index])
            x, layer_weights = layer(x, (new_keys, new_values), own_mask, cross, cross_mask, last)
            weights = layer_weights if last else weights
        logits = self.output(self.norm(x))
        assert weights is not None
        return logits, weights, TransformerState(tuple(keys), tuple(values), weights[:, -1])

    def initial_state(self, memory: ListenerOutput | CrossMemory) -> TransformerState:
        heads = self.layers[0].self_attention.heads
        return empty_state(memory, len(self.layers), heads, self.embedding.embedding_dim, self.embedding.weight.dtype)

    def step(
        self, tokens: torch.Tensor, state: TransformerState, memory: ListenerOutput | CrossMemory
    ) -> tuple[torch.Tensor, TransformerState]:
        """Logits `(batch, vocabulary)` for the character after `tokens` `(batch,)`, and the new state."""
        logits, _, state = self.run(tokens[:, None], self.prepare(memory), state)
        return logits[:, 0], state

    def forward(
        self, memory: ListenerOutput, targets_in: torch.Tensor, teacher_forcing: float = 1.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits `(batch, steps, vocabulary)` and attention `(batch, steps, frames)` for `targets_in`.

        With `teacher_forcing` < 1, each character is replaced with probability 1 - teacher_forcing
        by the model's own prediction at that position from a first pass without gradients
        (parallel scheduled sampling, Duckworth et al. 2019): a causal model cannot feed back its
        predictions one at a time without giving up its one pass.
        """
        cross = self.prepare(memory)
        tokens = targets_in
        if teacher_forcing < 1.0:
            with torch.no_grad():
                predicted = self.run(targets_in, cross, None)[0].argmax(dim=-1)  # (batch, steps)
            own = torch.rand(tokens.shape, device=tokens.device) >= teacher_forcing
            own[:, 0] = False  # <sos> stays
            tokens = torch.where(own, predicted.roll(1, dims=1), tokens)
        logits, attention, _ = self.run(tokens, cross, None)
        return logits, attention
