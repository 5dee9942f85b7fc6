"""Decoding strategies behind one interface: each turns listener memory into n-best hypotheses.

The loop that drives a strategy (training's dev pass, `las decode`) never knows which one runs.
Every strategy works on a whole batch of utterances at once — beam search on utterances x beams
in one tensor batch per step — on CPU and CUDA alike.
"""

from __future__ import annotations

import torch

from las.config import DecodeConfig
from las.errors import LasError
from las.model.las import LAS
from las.model.speller import Speller
from las.pretrain import load_language_model
from las.search.beam import BeamSearch
from las.search.common import Hypothesis, Rules, Strategy, Symbols
from las.search.ctc_greedy import CTCGreedySearch
from las.search.paths import GreedySearch, SamplingSearch
from las.text import Vocabulary

__all__ = [
    "BeamSearch",
    "CTCGreedySearch",
    "GreedySearch",
    "Hypothesis",
    "Rules",
    "SamplingSearch",
    "Strategy",
    "Symbols",
    "build_strategy",
]


def build_strategy(config: DecodeConfig, vocabulary: Vocabulary, model: LAS | None = None) -> Strategy:
    """The strategy named by `config.strategy`, with its settings from the same config."""
    symbols, rules = Symbols.of(vocabulary), Rules.of(config)
    if config.strategy == "greedy":
        return GreedySearch(symbols, rules)
    if config.strategy == "sample":
        return SamplingSearch(
            symbols=symbols,
            rules=rules,
            samples=config.samples,
            temperature=config.temperature,
            nbest=config.nbest,
            seed=config.seed,
        )
    needs_ctc = config.strategy == "ctc" or (config.strategy == "beam" and config.ctc_weight > 0)
    if needs_ctc and (model is None or model.ctc_head is None):
        raise LasError(
            f"decode.strategy={config.strategy} with CTC needs a model trained with a CTC head (model.ctc_weight > 0)"
        )
    if config.strategy == "ctc":
        return CTCGreedySearch(symbols)
    if config.strategy == "beam":
        return BeamSearch(
            symbols=symbols,
            rules=rules,
            beam_size=config.beam_size,
            nbest=config.nbest,
            ctc_weight=config.ctc_weight,
            language_model=fused_language_model(config, vocabulary, model),
            lm_weight=config.lm_weight,
        )
    raise LasError(f"unknown decoding strategy {config.strategy!r} (choose from greedy, sample, beam, ctc)")


def fused_language_model(config: DecodeConfig, vocabulary: Vocabulary, model: LAS | None) -> Speller | None:
    """The LM for shallow fusion, on the model's device; None when fusion is off."""
    if config.lm_weight == 0:
        return None
    if not config.lm:
        raise LasError("decode.lm_weight > 0 needs a language model: decode.lm=FILE (written by las pretrain)")
    device = next(model.parameters()).device if model is not None else torch.device("cpu")
    return load_language_model(config.lm, vocabulary).to(device)
