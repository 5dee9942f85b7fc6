"""`las pretrain`: the speller trained alone as a character language model on the training
transcripts, and on text without audio (`--text`), its attention context held at zero (CMU
11-785 HW4 recitation). `las train --set train.speller_init=FILE` then starts joint training
from these weights; `las decode --lm FILE` fuses it into beam search."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from las.core.config import Config
from las.core.errors import LasError
from las.core.files import make_directory, read_text, save_atomically
from las.core.progress import progress_bar, warn
from las.core.text import Vocabulary, clean_transcript
from las.data.dataset import speller_targets
from las.model.las import LAS
from las.model.losses import attention_loss
from las.model.pretrained import FORMAT, silent_memory


def read_text_corpus(path: str | Path, vocabulary: Vocabulary) -> list[str]:
    """The sentences of a text file, one per line, that `vocabulary` can spell; the others are
    left out with one warning (a language model for a model must share its characters)."""
    lines = read_text(path, "--text").splitlines()
    sentences = [sentence for line in lines if (sentence := clean_transcript(line))]
    kept = [sentence for sentence in sentences if not vocabulary.unknown_characters(sentence)]
    if len(kept) < len(sentences):
        example = next(sentence for sentence in sentences if vocabulary.unknown_characters(sentence))
        unknown = "".join(sorted(vocabulary.unknown_characters(example)))
        warn(
            f"{path}: left out {len(sentences) - len(kept)} of {len(sentences)} lines with characters the model's "
            f"vocabulary lacks (first: {example[:60]!r}, {unknown!r})"
        )
    if not kept:
        raise LasError(f"{path}: no line to learn from")
    return kept


def pretrain_speller(
    config: Config,
    texts: list[str],
    out: str | Path,
    epochs: int,
    batch_size: int = 64,
    vocabulary: Vocabulary | None = None,
) -> list[float]:
    """Train the speller of `config.model` on `texts` with `vocabulary` (default: the texts'
    characters); save it to `out`; return the mean loss per epoch."""
    vocabulary = vocabulary or Vocabulary.from_texts(texts)
    torch.manual_seed(config.train.seed)
    speller = LAS.build(config.model, config.features.mel_bins, len(vocabulary)).speller
    optimizer = torch.optim.Adam(speller.parameters(), lr=config.train.learning_rate)
    encoded = [torch.tensor(vocabulary.encode(text)) for text in texts]
    losses = []
    for _ in progress_bar(range(epochs), "pretrain", "epoch"):
        total = 0.0
        order = torch.randperm(len(encoded)).tolist()
        batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]
        for indices in batches:
            targets_in, targets_out, _ = speller_targets([encoded[index] for index in indices], vocabulary)
            memory = silent_memory(len(indices), config.model.key_dim, config.model.value_dim)
            logits, _ = speller(memory, targets_in)
            loss = attention_loss(logits, targets_out, config.train.label_smoothing)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(speller.parameters(), config.train.gradient_clip)
            optimizer.step()
            total += loss.item()
        losses.append(total / len(batches))
    out = Path(out)
    make_directory(out.parent, "--out folder")
    payload = {
        "format": FORMAT,
        "vocabulary": vocabulary.to_list(),
        "model": dataclasses.asdict(config.model),
        "speller": speller.state_dict(),
    }
    save_atomically(out, payload)
    return losses
