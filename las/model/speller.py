"""The speller: a stack of LSTM cells that emits one character per step while attending to the listener."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from las.model.attention import Attention
from las.model.listener import ListenerOutput


class SpellerState(NamedTuple):
    """Everything one decoding step hands to the next, batch first so beam search can reorder it."""

    hidden: tuple[torch.Tensor, ...]  # per layer (batch, hidden)
    cell: tuple[torch.Tensor, ...]  # per layer (batch, hidden)
    context: torch.Tensor  # (batch, value_dim): the previous step's attention read-out
    weights: torch.Tensor  # (batch, frames): the previous step's attention weights
    # What the attention reads of the past (Attention.attend): the previous weights, or with
    # cumulative attention their sum over all previous steps (Chorowski et al. 2015), `(batch,
    # frames)`; a GMM attention's mixture positions `(batch, mixtures)`.
    history: torch.Tensor

    def select(self, indices: torch.Tensor) -> SpellerState:
        """Rows `indices` of every tensor (beam search reorders hypotheses this way)."""
        return SpellerState(
            tuple(tensor[indices] for tensor in self.hidden),
            tuple(tensor[indices] for tensor in self.cell),
            self.context[indices],
            self.weights[indices],
            self.history[indices],
        )


class Speller(nn.Module):
    def __init__(
        self,
        vocabulary_size: int,
        embedding_dim: int,
        hidden_size: int,
        layers: int,
        key_dim: int,
        value_dim: int,
        attention: Attention,
        dropout: float,
        tie_embedding: bool,
        cumulative_attention: bool = False,
    ) -> None:
        super().__init__()
        attention.cumulative = cumulative_attention
        self.embedding = nn.Embedding(vocabulary_size, embedding_dim)
        sizes = [embedding_dim + value_dim] + [hidden_size] * layers
        self.cells = nn.ModuleList(nn.LSTMCell(size, hidden_size) for size in sizes[:-1])
        self.query = nn.Linear(hidden_size, key_dim)  # φ(s) of Chan et al.
        self.attention = attention
        self.dropout = nn.Dropout(dropout)
        # Character distribution from [hidden; context] through a small MLP; its last layer can
        # share the embedding matrix (Press & Wolf 2017), hence the embedding_dim bottleneck.
        self.bottleneck = nn.Linear(hidden_size + value_dim, embedding_dim)
        self.output = nn.Linear(embedding_dim, vocabulary_size)
        if tie_embedding:
            self.output.weight = self.embedding.weight

    @property
    def attention_dimensions(self) -> tuple[int, int]:
        """(key_dim, value_dim) of the memory it attends to."""
        return self.query.out_features, self.bottleneck.in_features - self.query.in_features

    def initial_state(self, memory: ListenerOutput) -> SpellerState:
        batch = memory.values.shape[0]
        zeros = memory.values.new_zeros(batch, self.query.in_features)
        layers = len(self.cells)
        uniform = memory.mask.float() / memory.lengths[:, None].float()  # (batch, frames)
        context = memory.values.new_zeros(batch, memory.values.shape[2])
        history = self.attention.initial_history(uniform)
        return SpellerState((zeros,) * layers, (zeros,) * layers, context, uniform, history)

    def step(
        self, tokens: torch.Tensor, state: SpellerState, memory: ListenerOutput
    ) -> tuple[torch.Tensor, SpellerState]:
        """Logits `(batch, vocabulary)` for the character after `tokens` `(batch,)`, and the new state."""
        x = torch.cat([self.embedding(tokens), state.context], dim=-1)  # (batch, embedding + value)
        hidden, cell = [], []
        for layer, lstm in enumerate(self.cells):
            h, c = lstm(x, (state.hidden[layer], state.cell[layer]))
            hidden.append(h)
            cell.append(c)
            x = self.dropout(h)
        context, weights, history = self.attention.attend(
            self.query(x), memory.keys, memory.values, memory.mask, state.history
        )
        logits = self.output(torch.tanh(self.bottleneck(torch.cat([x, context], dim=-1))))
        return logits, SpellerState(tuple(hidden), tuple(cell), context, weights, history)

    def forward(
        self, memory: ListenerOutput, targets_in: torch.Tensor, teacher_forcing: float = 1.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits `(batch, steps, vocabulary)` and attention `(batch, steps, frames)` for `targets_in`.

        With `teacher_forcing` < 1 each utterance feeds back its own previous prediction with
        probability 1 - teacher_forcing per step (scheduled sampling, Bengio et al. 2015).
        """
        state = self.initial_state(memory)
        logits, attention = [], []
        tokens = targets_in[:, 0]
        for step in range(targets_in.shape[1]):
            if step > 0:
                tokens = targets_in[:, step]
                if teacher_forcing < 1.0:
                    own = torch.rand(tokens.shape, device=tokens.device) >= teacher_forcing
                    tokens = torch.where(own, logits[-1].argmax(dim=-1), tokens)
            step_logits, state = self.step(tokens, state, memory)
            logits.append(step_logits)
            attention.append(state.weights)
        return torch.stack(logits, dim=1), torch.stack(attention, dim=1)
