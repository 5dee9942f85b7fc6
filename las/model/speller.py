"""The speller: a stack of LSTM cells that emits one character per step while attending to the listener."""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import nn

from las.model.attention import Attention
from las.model.listener import ListenerOutput
from las.model.recurrence import SharedWeight


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

    def prepare(self, memory: ListenerOutput) -> ListenerOutput:
        """The memory as the search hands it to every step: as it is (las.model.transformer_speller
        projects it once per utterance)."""
        return memory

    def initial_state(self, memory: ListenerOutput) -> SpellerState:
        batch = memory.values.shape[0]
        zeros = memory.values.new_zeros(batch, self.query.in_features)
        layers = len(self.cells)
        uniform = memory.mask.float() / memory.lengths[:, None].float()  # (batch, frames)
        context = memory.values.new_zeros(batch, memory.values.shape[2])
        history = self.attention.initial_history(uniform)
        return SpellerState((zeros,) * layers, (zeros,) * layers, context, uniform, history)

    def token_gates(self, tokens: torch.Tensor | None = None) -> torch.Tensor:
        """The first cell's gate inputs from each character `(batch, 4 * hidden)`, its biases
        included; with no `tokens`, for the whole vocabulary `(vocabulary, 4 * hidden)`: a table a
        training step computes once and indexes every step instead of a product per step."""
        cell = self.cells[0]
        embedded = self.embedding.weight if tokens is None else self.embedding(tokens)
        weight = cell.weight_ih[:, : self.embedding.embedding_dim]  # the embedding's columns of [embedding; context]
        return torch.nn.functional.linear(embedded, weight, cell.bias_ih + cell.bias_hh)

    def recurrent_weights(self) -> tuple[SharedWeight, SharedWeight]:
        """The first cell's weights for the context `(value, 4 * hidden)` and its own hidden state
        `(hidden, 4 * hidden)`, taken once per sequence: a slice of a parameter taken every step
        would cost a zero-filled gradient of the whole parameter every step, and a shared weight's
        gradient is one product for all steps (las.model.recurrence)."""
        first = self.cells[0]
        context_weight = first.weight_ih[:, self.embedding.embedding_dim :].t()
        return SharedWeight(context_weight), SharedWeight(first.weight_hh.t())

    def advance(
        self,
        token_gates: torch.Tensor,
        state: SpellerState,
        memory: ListenerOutput,
        weights: tuple[SharedWeight, SharedWeight],
    ) -> tuple[torch.Tensor, SpellerState]:
        """One character: the cells and the attention, from the character's gate inputs `(batch,
        4 * hidden)` (`token_gates`) and the `recurrent_weights`. Returns the top cell's output
        after dropout `(batch, hidden)`, which with the new context is what the character
        distribution reads, and the new state."""
        context_weight, hidden_weight = weights
        gates = hidden_weight.addmm(context_weight.addmm(token_gates, state.context), state.hidden[0])
        h, c = lstm_update(gates, state.cell[0])
        hidden, cell = [h], [c]
        for layer, lstm in enumerate(self.cells[1:], start=1):
            h, c = lstm(self.dropout(h), (state.hidden[layer], state.cell[layer]))
            hidden.append(h)
            cell.append(c)
        output = self.dropout(h)
        context, weights, history = self.attention.attend(
            self.query(output), memory.keys, memory.values, memory.mask, state.history
        )
        return output, SpellerState(tuple(hidden), tuple(cell), context, weights, history)

    def distribution(self, output: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Logits `(..., vocabulary)` from the top cell's output `(..., hidden)` and the context `(..., value)`."""
        return self.output(torch.tanh(self.bottleneck(torch.cat([output, context], dim=-1))))

    def step(
        self, tokens: torch.Tensor, state: SpellerState, memory: ListenerOutput
    ) -> tuple[torch.Tensor, SpellerState]:
        """Logits `(batch, vocabulary)` for the character after `tokens` `(batch,)`, and the new state."""
        output, state = self.advance(self.token_gates(tokens), state, memory, self.recurrent_weights())
        return self.distribution(output, state.context), state

    def forward(
        self, memory: ListenerOutput, targets_in: torch.Tensor, teacher_forcing: float | torch.Tensor = 1.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits `(batch, steps, vocabulary)` and attention `(batch, steps, frames)` for `targets_in`.

        With `teacher_forcing` < 1 each utterance feeds back its own previous prediction with
        probability 1 - teacher_forcing per step (scheduled sampling, Bengio et al. 2015). The
        character distributions are computed once for all steps after the loop; a prediction to
        feed back is taken from the same distribution without its gradient. A rate given as a
        tensor `()` always draws (a CUDA graph holds no branch on a value; las.model.graphed_speller).
        """
        sampling = isinstance(teacher_forcing, torch.Tensor) or teacher_forcing < 1.0
        state = self.initial_state(memory)
        table, weights = self.token_gates(), self.recurrent_weights()  # table: (vocabulary, 4 * hidden)
        outputs, contexts, attention = [], [], []
        tokens = targets_in[:, 0]
        for step in range(targets_in.shape[1]):
            if step > 0:
                tokens = targets_in[:, step]
                if sampling:
                    own = torch.rand(tokens.shape, device=tokens.device) >= teacher_forcing
                    with torch.no_grad():
                        predicted = self.distribution(outputs[-1], contexts[-1]).argmax(dim=-1)
                    tokens = torch.where(own, predicted, tokens)
            output, state = self.advance(table[tokens], state, memory, weights)
            outputs.append(output)
            contexts.append(state.context)
            attention.append(state.weights)
        logits = self.distribution(torch.stack(outputs, dim=1), torch.stack(contexts, dim=1))
        return logits, torch.stack(attention, dim=1)


def lstm_update(gates: torch.Tensor, cell: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An LSTM cell's new hidden and cell states `(batch, hidden)` from its gate pre-activations
    `(batch, 4 * hidden)` in PyTorch's order (input, forget, cell, output)."""
    input_gate, forget_gate, candidate, output_gate = gates.chunk(4, dim=1)
    cell = torch.sigmoid(forget_gate) * cell + torch.sigmoid(input_gate) * torch.tanh(candidate)
    return torch.sigmoid(output_gate) * torch.tanh(cell), cell
