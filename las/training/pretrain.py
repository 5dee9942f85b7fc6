"""`las pretrain`: the speller trained alone as a character language model on the training
transcripts, and on text without audio (`--text`), its attention context held at zero (CMU
11-785 HW4 recitation). `las train --set train.speller_init=FILE` then starts joint training
from these weights; `las decode --lm FILE` fuses it into beam search. With held-out sentences,
the epoch that predicts them best is the one saved: a few thousand transcripts are learnt by
heart within a few epochs, and a model that has is a worse guide to new speech."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import torch

from las.core.config import Config
from las.core.errors import LasError
from las.core.files import make_directory, read_text, save_atomically
from las.core.progress import progress_bar, warn
from las.core.text import PAD_INDEX, Vocabulary, clean_transcript
from las.data.dataset import speller_targets
from las.model.las import LAS
from las.model.losses import attention_loss
from las.model.pretrained import FORMAT, silent_memory


def spellable(sentences: Sequence[str], vocabulary: Vocabulary, source: str | Path) -> list[str]:
    """The `sentences` that `vocabulary` can spell; the others are left out with one warning (a
    language model for a model must share its characters)."""
    kept = [sentence for sentence in sentences if not vocabulary.unknown_characters(sentence)]
    if len(kept) < len(sentences):
        example = next(sentence for sentence in sentences if vocabulary.unknown_characters(sentence))
        unknown = "".join(sorted(vocabulary.unknown_characters(example)))
        warn(
            f"{source}: left out {len(sentences) - len(kept)} of {len(sentences)} lines with characters the model's "
            f"vocabulary lacks (first: {example[:60]!r}, {unknown!r})"
        )
    return kept


def read_text_corpus(path: str | Path, vocabulary: Vocabulary) -> list[str]:
    """The sentences of a text file, one per line, that `vocabulary` can spell."""
    lines = read_text(path, "--text").splitlines()
    kept = spellable([sentence for line in lines if (sentence := clean_transcript(line))], vocabulary, path)
    if not kept:
        raise LasError(f"{path}: no line to learn from")
    return kept


class LanguageModelFit(NamedTuple):
    """What `pretrain_speller` did: the mean training loss of each epoch, the held-out sentences'
    cross-entropy (nats a character, <eos> included) after each (empty without them), and the
    epoch (from 1) whose weights were saved."""

    losses: list[float]
    held_out: list[float]
    saved_epoch: int


def batches_of(encoded: Sequence[torch.Tensor], order: Sequence[int], size: int) -> list[list[torch.Tensor]]:
    """`encoded` sentences in `order`, `size` at a time."""
    return [[encoded[index] for index in order[start : start + size]] for start in range(0, len(order), size)]


def text_loss(
    speller: torch.nn.Module, batch: list[torch.Tensor], vocabulary: Vocabulary, config: Config, label_smoothing: float
) -> tuple[torch.Tensor, int]:
    """The speller's loss per character on `batch` (encoded sentences), and its characters."""
    targets_in, targets_out, _ = speller_targets(batch, vocabulary)
    memory = silent_memory(len(batch), config.model.key_dim, config.model.value_dim)
    logits, _ = speller(memory, targets_in)
    return attention_loss(logits, targets_out, label_smoothing), int((targets_out != PAD_INDEX).sum())


def held_out_loss(
    speller: torch.nn.Module, batches: list[list[torch.Tensor]], vocabulary: Vocabulary, config: Config
) -> float:
    """Cross-entropy in nats a character of `batches`, no dropout and no label smoothing."""
    speller.eval()
    total, characters = 0.0, 0
    with torch.no_grad():
        for batch in batches:
            loss, count = text_loss(speller, batch, vocabulary, config, 0.0)
            total, characters = total + loss.item() * count, characters + count
    speller.train()
    return total / max(1, characters)


def pretrain_speller(
    config: Config,
    texts: list[str],
    out: str | Path,
    epochs: int,
    batch_size: int = 64,
    vocabulary: Vocabulary | None = None,
    held_out: Sequence[str] = (),
) -> LanguageModelFit:
    """Train the speller of `config.model` on `texts` with `vocabulary` (default: the texts'
    characters) and save it to `out`: the last epoch's weights or, with `held_out` sentences
    (spelled with `vocabulary`), those of the epoch whose cross-entropy on them is lowest."""
    vocabulary = vocabulary or Vocabulary.from_texts(texts)
    torch.manual_seed(config.train.seed)
    speller = LAS.build(config.model, config.features.mel_bins, len(vocabulary)).speller
    optimizer = torch.optim.Adam(speller.parameters(), lr=config.train.learning_rate)
    encoded = [torch.tensor(vocabulary.encode(text)) for text in texts]
    held_out_batches = batches_of(
        [torch.tensor(vocabulary.encode(text)) for text in held_out], range(len(held_out)), batch_size
    )
    losses: list[float] = []
    held_out_losses: list[float] = []
    best, saved_epoch = speller.state_dict(), 0
    for epoch in progress_bar(range(epochs), "pretrain", "epoch"):
        total = 0.0
        batches = batches_of(encoded, torch.randperm(len(encoded)).tolist(), batch_size)
        for batch in batches:
            loss, _ = text_loss(speller, batch, vocabulary, config, config.train.label_smoothing)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(speller.parameters(), config.train.gradient_clip)
            optimizer.step()
            total += loss.item()
        losses.append(total / len(batches))
        if held_out_batches:
            held_out_losses.append(held_out_loss(speller, held_out_batches, vocabulary, config))
        if not held_out_batches or held_out_losses[-1] == min(held_out_losses):
            best, saved_epoch = copy.deepcopy(speller.state_dict()), epoch + 1
    out = Path(out)
    make_directory(out.parent, "--out folder")
    payload = {
        "format": FORMAT,
        "vocabulary": vocabulary.to_list(),
        "model": dataclasses.asdict(config.model),
        "speller": best,
    }
    save_atomically(out, payload)
    return LanguageModelFit(losses, held_out_losses, saved_epoch)
