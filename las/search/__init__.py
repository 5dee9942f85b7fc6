"""Decoding strategies behind one interface: each turns listener memory into n-best hypotheses.

The loop that drives a strategy (training's dev pass, `las decode`) never knows which one runs.
Every strategy works on a whole batch of utterances at once — beam search on utterances x beams
in one tensor batch per step — on CPU and CUDA alike, and every one but CTC greedy scores with
the same scorers (las.search.scorers) under the same rules (las.search.common.Rules).

Layer 3: may use las.core, las.data and las.model.
"""

from __future__ import annotations

import dataclasses

import torch

from las.core.config import DecodeConfig
from las.core.errors import LasError
from las.core.text import Vocabulary
from las.model.las import LAS
from las.model.pretrained import load_language_model
from las.model.speller import Speller
from las.search.beam import BeamSearch
from las.search.common import Hypothesis, Rules, Strategy, Symbols
from las.search.ctc_greedy import CTCGreedySearch
from las.search.lexicon import Lexicon, read_lexicon
from las.search.paths import GreedySearch, SamplingSearch
from las.search.scorers import Scoring

__all__ = [
    "STRATEGIES",
    "BeamSearch",
    "CTCGreedySearch",
    "GreedySearch",
    "Hypothesis",
    "Lexicon",
    "Rules",
    "SamplingSearch",
    "Scoring",
    "Strategy",
    "Symbols",
    "build_strategy",
]

# decode.strategy names (las.core.config.StrategyName lists the same, for the CLI without torch).
STRATEGIES: dict[str, type[Strategy]] = {
    "greedy": GreedySearch,
    "sample": SamplingSearch,
    "beam": BeamSearch,
    "ctc": CTCGreedySearch,
}


def build_strategy(config: DecodeConfig, vocabulary: Vocabulary, model: LAS | None = None) -> Strategy:
    """The strategy named by `config.strategy`; each of its fields comes from the `DecodeConfig`
    field of the same name, or is the symbols, rules or scoring that the config sets."""
    if config.strategy not in STRATEGIES:
        raise LasError(f"unknown decoding strategy {config.strategy!r} (choose from {', '.join(STRATEGIES)})")
    strategy = STRATEGIES[config.strategy]
    if (config.strategy == "ctc" or config.ctc_weight > 0) and (model is None or model.ctc_head is None):
        raise LasError(
            f"decode.strategy={config.strategy} with CTC needs a model trained with a CTC head (model.ctc_weight > 0)"
        )
    if config.cuda_graphs:
        check_graphs(config, model)
    if config.lexicon and config.strategy == "ctc":
        raise LasError("decode.lexicon keeps the speller's words in a list: use decode.strategy=beam, greedy or sample")
    made = {
        "symbols": Symbols.of(vocabulary),
        "rules": Rules.of(config),
        "scoring": Scoring(
            config.ctc_weight,
            fused_language_model(config, vocabulary, model),
            config.lm_weight,
            config.ctc_window_nats,
            closed_vocabulary(config, vocabulary, model),
        ),
    }
    names = [item.name for item in dataclasses.fields(strategy)]  # type: ignore[arg-type]
    return strategy(**{name: made[name] if name in made else getattr(config, name) for name in names})


def fused_language_model(config: DecodeConfig, vocabulary: Vocabulary, model: LAS | None) -> Speller | None:
    """The LM for shallow fusion, on the model's device; None when fusion is off."""
    config.check_language_model()
    if config.lm_weight == 0:
        return None
    return load_language_model(config.lm, vocabulary).to(device_of(model))


def closed_vocabulary(config: DecodeConfig, vocabulary: Vocabulary, model: LAS | None) -> Lexicon | None:
    """The words of `decode.lexicon`, on the model's device; None without one."""
    if not config.lexicon:
        return None
    lexicon = read_lexicon(config.lexicon, vocabulary)
    return Lexicon(lexicon.edges.to(device_of(model)), lexicon.words)


def device_of(model: LAS | None) -> torch.device:
    return next(model.parameters()).device if model is not None else torch.device("cpu")


def check_graphs(config: DecodeConfig, model: LAS | None) -> None:
    """One clear error where `decode.cuda_graphs` cannot serve: each step of beam, greedy or
    random search, of a PyTorch model on a CUDA device, is one graph (las.search.graphs)."""
    if config.strategy not in ("beam", "greedy", "sample"):
        raise LasError(
            f"config key 'decode.cuda_graphs': graphs the steps of beam, greedy and random search, "
            f"not decode.strategy={config.strategy}"
        )
    if not isinstance(model, torch.nn.Module):
        raise LasError("config key 'decode.cuda_graphs': needs a PyTorch model (an exported one runs in ONNX Runtime)")
    device = next(model.parameters()).device
    if device.type != "cuda":
        raise LasError(f"config key 'decode.cuda_graphs': needs a CUDA device, decoding runs on {device}")
