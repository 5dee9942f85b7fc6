"""Spellers pre-trained as character language models (`las pretrain`): their file format, and
how decoding (shallow fusion) and training (`train.speller_init`) read them back. Kept apart
from the pretrain command, so that decoding does not import training code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from las.core.config import Config
from las.core.errors import LasError
from las.core.text import Vocabulary
from las.model.las import LAS, AnySpeller
from las.model.listener import ListenerOutput

FORMAT = "las-speller"


def silent_memory(batch: int, key_dim: int, value_dim: int, device: torch.device | None = None) -> ListenerOutput:
    """One zero frame per utterance: the attention context is zero, so the speller only sees text."""
    zeros = torch.zeros(batch, 1, 1, device=device)
    return ListenerOutput(
        keys=zeros.expand(batch, 1, key_dim),
        values=zeros.expand(batch, 1, value_dim),
        mask=torch.ones(batch, 1, dtype=torch.bool, device=device),
        lengths=torch.ones(batch, dtype=torch.long, device=device),
        hidden=zeros,
    )


def read_speller_file(path: str | Path, vocabulary: Vocabulary, setting: str) -> dict[str, Any]:
    """The contents of a file written by `las pretrain`, checked against `vocabulary`; `setting`
    names the option that gave the path, for the error messages."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise LasError(f"{setting}: file not found: {path}") from None
    except Exception as error:  # foreign or damaged files fail in many ways
        raise LasError(f"{path}: not a readable pre-trained speller ({type(error).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise LasError(f"{path}: not a pre-trained speller (write one with las pretrain)")
    if payload["vocabulary"] != vocabulary.to_list():
        raise LasError(f"{path}: its vocabulary differs from the model's")
    return payload


def load_language_model(path: str | Path, vocabulary: Vocabulary) -> AnySpeller:
    """The character language model in `path` (a speller pre-trained by `las pretrain`), in eval mode."""
    payload = read_speller_file(path, vocabulary, "decode.lm")
    if "model" not in payload:
        raise LasError(f"{path}: written by an older las pretrain without its model settings; pre-train it again")
    model = Config.from_dict({"model": payload["model"]}).model
    speller = LAS.build(model, 1, len(vocabulary)).speller
    speller.load_state_dict(payload["speller"])
    return speller.eval()


def load_speller(speller: AnySpeller, path: str | Path, vocabulary: Vocabulary) -> None:
    """Copy a pre-trained speller into `speller`; its vocabulary and shapes must match."""
    payload = read_speller_file(path, vocabulary, "train.speller_init")
    try:
        speller.load_state_dict(payload["speller"])
    except RuntimeError:
        raise LasError(f"{path}: speller shapes differ from model.* (pre-train with the same settings)") from None
