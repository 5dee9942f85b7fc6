"""`LAS(listener, speller)`: the composed model, with an optional CTC head on the listener."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import nn

from las.core.config import ModelConfig
from las.model.attention_listener import AttentionListener
from las.model.attention_registry import build_attention
from las.model.listener import Listener, ListenerOutput
from las.model.speller import Speller
from las.model.streaming_listener import ForwardListener
from las.model.transformer_speller import TransformerSpeller

AnyListener = Listener | ForwardListener | AttentionListener
AnySpeller = Speller | TransformerSpeller
# A speller's teacher-forced pass: logits and attention from the memory, targets_in and the rate.
Listen = Callable[[torch.Tensor, torch.Tensor], ListenerOutput]
Spell = Callable[[ListenerOutput, torch.Tensor, float], tuple[torch.Tensor, torch.Tensor]]


class LASOutput(NamedTuple):
    logits: torch.Tensor  # (batch, steps, vocabulary)
    attention: torch.Tensor  # (batch, steps, encoder_frames)
    memory: ListenerOutput
    ctc_log_probs: torch.Tensor | None  # (encoder_frames, batch, vocabulary), as F.ctc_loss wants


class LAS(nn.Module):
    def __init__(self, listener: AnyListener, speller: AnySpeller, ctc_head: nn.Linear | None = None) -> None:
        super().__init__()
        self.listener = listener
        self.speller = speller
        self.ctc_head = ctc_head

    @property
    def input_size(self) -> int:
        """Feature dimension the model reads (80 log-mels by default; precomputed features vary)."""
        return self.listener.input_size

    @classmethod
    def build(cls, config: ModelConfig, input_size: int, vocabulary_size: int) -> LAS:
        listener = build_listener(config, input_size)
        speller = build_speller(config, vocabulary_size)
        ctc_head = nn.Linear(listener.output_size, vocabulary_size) if config.ctc_weight > 0 else None
        return cls(listener, speller, ctc_head)

    def forward(
        self,
        features: torch.Tensor,  # (batch, frames, mel_bins)
        feature_lengths: torch.Tensor,  # (batch,)
        targets_in: torch.Tensor,  # (batch, steps)
        teacher_forcing: float = 1.0,
        spell: Spell | None = None,
        listen: Listen | None = None,
    ) -> LASOutput:
        """With `spell` and `listen`, the speller's and the listener's passes as they run their
        weights (training's CUDA graphs: las.model.graphs)."""
        memory = (listen or self.listener)(features, feature_lengths)
        logits, attention = (spell or self.speller)(memory, targets_in, teacher_forcing)
        ctc_log_probs = None
        if self.ctc_head is not None:
            ctc_log_probs = self.ctc_head(memory.hidden).log_softmax(dim=-1).transpose(0, 1)
        return LASOutput(logits, attention, memory, ctc_log_probs)


def build_listener(config: ModelConfig, input_size: int) -> AnyListener:
    """The listener `config.listener` names, reading `input_size` features per frame."""
    sizes = (input_size, config.listener_hidden, config.pyramid_layers, config.key_dim, config.value_dim)
    if config.listener == "pblstm":
        return Listener(*sizes, config.dropout, config.locked_dropout, config.frame_stacking)
    if config.listener == "plstm":
        return ForwardListener(*sizes, config.dropout, config.lookahead, config.locked_dropout)
    return AttentionListener(
        input_size,
        config.transformer_dim,
        config.listener_layers,
        config.transformer_heads,
        config.transformer_feedforward,
        config.pyramid_layers,
        config.time_reduction,
        config.key_dim,
        config.value_dim,
        config.dropout,
        convolution_kernel=config.conformer_kernel if config.listener == "conformer" else 0,
    )


def build_speller(config: ModelConfig, vocabulary_size: int) -> AnySpeller:
    """The speller `config.speller` names."""
    if config.speller == "transformer":
        return TransformerSpeller(
            vocabulary_size,
            config.transformer_speller_dim,
            config.speller_layers,
            config.transformer_heads,
            config.transformer_speller_feedforward,
            config.key_dim,
            config.value_dim,
            config.dropout,
            config.tie_embedding,
        )
    attention = build_attention(
        config.attention,
        config.key_dim,
        config.value_dim,
        config.attention_heads,
        config.attention_temperature,
        config.location_channels,
        config.location_kernel,
        mixtures=config.gmm_mixtures,
        softplus=config.gmm_softplus,
        chunk_size=config.chunk_size,
    )
    return Speller(
        vocabulary_size,
        config.embedding_dim,
        config.speller_hidden,
        config.speller_layers,
        config.key_dim,
        config.value_dim,
        attention,
        config.dropout,
        config.tie_embedding,
        config.cumulative_attention,
    )
