"""Fine-tuning (`las train --init CHECKPOINT`): a new run starts from a trained model's weights,
for every part that fits, and reports what it did with each part.

Weights are matched by name. Those whose rows are characters (the embedding, the output layer and
the CTC head) are copied row by row for the characters both vocabularies share, so a changed
character set keeps what was learnt for the others. A new letter whose other case the checkpoint
has starts from that one's rows (a model fine-tuned to lower case spells "a" where it spelt "A");
other new characters start from the usual random initialisation. Any other weight must have the
same shape: a model of other `model.*` settings cannot take these weights, and that is one error
naming the settings that differ. A part of another kind (`model.listener`, `model.speller`) starts
anew, the rest loaded: a Transformer speller learns on a trained pBLSTM listener. A new listener
renews the CTC head too, which reads its outputs.

The run's model and features settings start from the checkpoint's (`fine_tuning_base`), and its
recipe and `--set` change only what they name: a Conformer checkpoint fine-tunes as a Conformer
without its settings said again, and a recipe that names a Transformer speller puts one on it.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch
from torch import nn

from las.core.config import Config, ModelConfig
from las.core.errors import LasError
from las.core.text import Vocabulary
from las.export.runtime import load_model
from las.model.checkpoint import Checkpoint

# Weights indexed by character in their first dimension.
CHARACTER_ROWS = (
    "speller.embedding.weight",
    "speller.output.weight",
    "speller.output.bias",
    "ctc_head.weight",
    "ctc_head.bias",
)


def fine_tuning_base(path: str | Path) -> Config:
    """What a run with `--init path` builds its settings on before its recipe and `--set`: the
    checkpoint's model and features (what its weights are, and what they learnt to hear), the
    defaults elsewhere."""
    trained = load_model(path).config
    return dataclasses.replace(Config(), model=trained.model, features=trained.features)


def initialise(
    model: nn.Module,
    config: ModelConfig,
    vocabulary: Vocabulary,
    checkpoint: Checkpoint,
    path: str | Path,
    frozen: tuple[str, ...] = (),
) -> list[str]:
    """Copy into `model` (built from `config` for `vocabulary`) every weight of `checkpoint` that
    fits; one line per part (listener, speller, ctc_head) saying what was loaded, initialised or
    skipped, and one for the characters. A part that starts anew cannot be among the `frozen`."""
    ours, theirs = model.state_dict(), checkpoint.model_state
    rows, cased = shared_rows(vocabulary, checkpoint.vocabulary)
    renewed = renewed_parts(config, checkpoint.config.model)
    for part in set(frozen) & renewed.keys():  # it would keep its random weights: wrong text, no error
        raise LasError(f"train.freeze={part}: the {part} starts anew ({renewed[part]}), so it cannot be frozen")
    counts: dict[str, Counter[str]] = {}
    with torch.no_grad():
        for name, weight in ours.items():
            owner = name.split(".")[0]
            part = counts.setdefault(owner, Counter())
            if owner in renewed:
                part[f"initialised ({renewed[owner]})"] += 1
            elif name not in theirs:
                part["initialised (not in the checkpoint)"] += 1
            elif name in CHARACTER_ROWS and weight.shape[1:] == theirs[name].shape[1:]:
                # The model may be on a GPU already; the checkpoint is on the CPU.
                weight[rows[0].to(weight.device)] = theirs[name][rows[1]].to(weight)
                part["loaded by character"] += 1
            elif weight.shape == theirs[name].shape:
                weight.copy_(theirs[name])
                part["loaded"] += 1
            else:
                raise LasError(
                    f"{path}: weight {name} is {tuple(theirs[name].shape)} there, {tuple(weight.shape)} in this "
                    f"model: --init needs the same model settings and features ({differences(config, checkpoint)})"
                )
        for name in theirs.keys() - ours.keys():
            counts.setdefault(name.split(".")[0], Counter())["skipped (not in this model)"] += 1
    shared = len(rows[0]) - cased
    lines = [
        f"{part}: " + ", ".join(f"{count} {what}" for what, count in sorted(found.items()))
        for part, found in counts.items()
    ]
    started = f" ({cased} started from the same letter in the other case)" if cased else ""
    lines.append(f"characters: {shared} shared with the checkpoint, {len(vocabulary) - shared} new{started}")
    return lines


def renewed_parts(config: ModelConfig, theirs: ModelConfig) -> dict[str, str]:
    """Part -> why it starts anew: a listener or speller of another kind than the checkpoint's
    (and the CTC head of a new listener)."""
    renewed = {
        part: f"model.{part}={getattr(theirs, part)} there"
        for part in ("listener", "speller")
        if getattr(config, part) != getattr(theirs, part)
    }
    if "listener" in renewed:
        renewed["ctc_head"] = "a new listener"
    return renewed


def counterpart(symbol: str, index: Mapping[str, int]) -> int | None:
    """The checkpoint's row for `symbol`: its own, else its other case's (a letter), else none."""
    if symbol in index:
        return index[symbol]
    other = symbol.swapcase()
    return index.get(other) if len(other) == 1 else None  # "ß".swapcase() is "SS"


def shared_rows(ours: Vocabulary, theirs: Vocabulary) -> tuple[tuple[torch.Tensor, torch.Tensor], int]:
    """(rows in `ours`, rows in `theirs`) of the symbols with a counterpart there, and how many of
    those are a letter in the other case."""
    index = theirs.index
    pairs = [(position, counterpart(symbol, index)) for position, symbol in enumerate(ours.symbols)]
    found = [(position, row) for position, row in pairs if row is not None]
    mine, other = zip(*found, strict=True) if found else ((), ())
    cased = sum(symbol not in index for symbol, (_, row) in zip(ours.symbols, pairs, strict=True) if row is not None)
    return (torch.tensor(mine, dtype=torch.long), torch.tensor(other, dtype=torch.long)), cased


def check_shared_characters(characters: Iterable[str], theirs: Vocabulary, manifest: str, init: str) -> None:
    """Fine-tuning keeps what was learnt for the characters both models spell: transcripts that
    share none (but the space) with the checkpoint would keep nothing of its speller."""
    index = theirs.index
    letters = set(characters) - {" "}
    if letters and not any(counterpart(character, index) is not None for character in letters):
        sample = "".join(sorted(letters)[:10])
        raise LasError(
            f"{manifest}: its transcripts share no character with --init {init} (they spell {sample!r}...): "
            "train this character set from scratch"
        )


def differences(config: ModelConfig, checkpoint: Checkpoint) -> str:
    """The `model.*` settings of `checkpoint` that `config` does not share, or else its features'."""
    theirs = checkpoint.config.model
    found = [
        f"model.{item.name}={getattr(config, item.name)} here, {getattr(theirs, item.name)} there"
        for item in dataclasses.fields(config)
        if getattr(config, item.name) != getattr(theirs, item.name)
    ]
    return "; ".join(found) or f"features of {checkpoint.input_size} dimensions there"
