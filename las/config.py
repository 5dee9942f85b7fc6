"""The single source of truth for every setting: frozen dataclasses, TOML files, `--set` overrides.

A `Config` is built from the defaults below, then a TOML file (`--config`), then `KEY=VALUE`
overrides (`--set model.attention=location`), each layer replacing only the fields it names.
It is saved inside every checkpoint, so decoding needs nothing but the checkpoint.
"""

from __future__ import annotations

import dataclasses
import tomllib
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from las.errors import LasError


@dataclass(frozen=True)
class FeatureConfig:
    """Log-mel filterbank front end (computed once, cached on disk)."""

    sample_rate: int = 16000
    mel_bins: int = 80
    window_ms: float = 25.0
    hop_ms: float = 10.0


@dataclass(frozen=True)
class DataConfig:
    train: str = "data/an4/train.tsv"
    dev: str = "data/an4/dev.tsv"
    # How to read them: auto (by what the path is) | tsv | jsonl | kaldi | librispeech | hw4 |
    # hw4-folder | audio.
    input_format: str = "auto"
    # Feature cache shared by all runs; keyed by audio content and feature settings.
    cache_dir: str = ".cache/las/features"
    batch_size: int = 16
    # Largest padded batch in input frames: long utterances come in smaller batches.
    max_batch_frames: int = 8000
    # Processes that extract features and load training batches (0: all in the main process).
    workers: int = 2


@dataclass(frozen=True)
class ModelConfig:
    listener_hidden: int = 160  # per direction
    # Each halves the time axis: 2**layers shorter. Two (40 ms frames): at 8x, 7% of AN4 training
    # utterances have fewer frames than CTC needs for their characters.
    pyramid_layers: int = 2
    key_dim: int = 128
    value_dim: int = 128
    attention: str = "location"  # dot | scaled_dot | general | additive | location
    attention_heads: int = 1  # > 1: multi-head attention of that kind (divides key_dim, value_dim)
    attention_temperature: float = 1.0  # > 1 smooths attention weights, < 1 sharpens them
    location_channels: int = 10
    location_kernel: int = 15
    cumulative_attention: bool = True  # location attention convolves the sum of all previous weights
    embedding_dim: int = 128
    speller_hidden: int = 256
    speller_layers: int = 1
    dropout: float = 0.2
    locked_dropout: bool = False  # listener: one dropout mask per utterance, shared by all frames
    tie_embedding: bool = False
    ctc_weight: float = 0.5  # λ of the joint CTC-attention loss; 0 removes the CTC head


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 80
    learning_rate: float = 2e-3
    warmup_steps: int = 300
    final_learning_rate_scale: float = 0.05  # cosine decay ends at learning_rate * this
    weight_decay: float = 0.0
    gradient_clip: float = 5.0
    label_smoothing: float = 0.1
    # Teacher forcing rate falls linearly from 1 to `teacher_forcing_final` over these epochs.
    teacher_forcing_final: float = 0.9
    teacher_forcing_decay_epochs: int = 30
    # SpecAugment (Park et al. 2019): masks on the normalised features of training batches.
    frequency_masks: int = 2
    frequency_mask_width: int = 15
    time_masks: int = 2
    time_mask_width: int = 30
    specaugment_start_epoch: int = 5
    # Speed perturbation (Ko et al. 2015): each utterance is heard at speed 1-x, 1 or 1+x, drawn
    # anew every epoch (features of all three cached). 0 turns it off; needs audio, not features.
    speed_perturbation: float = 0.0
    # Average the weights of this many epochs with the lowest dev CER into averaged.pt (< 2: off).
    average_best: int = 5
    speller_init: str = ""  # a speller pre-trained by `las pretrain` to start from ("" for none)
    max_bad_batches: int = 20  # non-finite losses tolerated (skipped) before training stops
    seed: int = 1
    device: str = "auto"  # auto | cpu | cuda
    precision: str = "fp32"  # fp32 | bf16 (autocast: LSTMs and matmuls in bfloat16, losses in float32)
    compile: bool = False  # torch.compile the speller step, which runs once per output character
    out: str = "runs/an4"


@dataclass(frozen=True)
class DecodeConfig:
    strategy: str = "greedy"  # greedy | sample | beam | ctc (CTC greedy, needs a CTC head)
    batch_size: int = 32
    # Hypotheses end by this many characters per encoder frame (plus 5), and not before `min_`.
    max_length_ratio: float = 1.5
    min_length_ratio: float = 0.0
    beam_size: int = 8
    nbest: int = 1
    # Ranking: score / (characters + 1) when normalising (without it, short hypotheses win), plus
    # length_penalty per character. Scores themselves stay log-likelihoods.
    length_normalize: bool = True
    length_penalty: float = 0.0
    # <eos> only where log p(eos) > eos_threshold * max log p(other); 0 turns the rule off.
    eos_threshold: float = 0.0
    # Joint CTC prefix score in beam search; 0 for models without a CTC head unless set explicitly.
    # 0.5 beat 0.3 and 0.7 on all four AN4 checkpoints measured (docs/BENCHMARKS.md).
    ctc_weight: float = 0.5
    # Shallow fusion in beam search: + lm_weight * log p_LM(next character), with the character LM
    # written by `las pretrain` (same vocabulary).
    lm: str = ""
    lm_weight: float = 0.0
    samples: int = 32  # random search: paths drawn per utterance
    temperature: float = 1.0
    seed: int = 0


@dataclass(frozen=True)
class Config:
    features: FeatureConfig = field(default_factory=FeatureConfig)
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> Config:
        return override(cls(), values)

    def replace(self, assignments: list[str]) -> Config:
        """Apply `section.field=value` strings, each value parsed to the field's type."""
        values: dict[str, Any] = {}
        for assignment in assignments:
            key, separator, text = assignment.partition("=")
            if not separator:
                raise LasError(f"--set {assignment!r}: expected KEY=VALUE, e.g. model.attention=dot")
            section, _, name = key.strip().partition(".")
            values.setdefault(section, {})[name] = text.strip()
        return override(self, values)


def load_config(path: str | Path | None = None, assignments: list[str] | tuple[str, ...] = ()) -> Config:
    """Defaults, then the TOML file, then the `--set` assignments."""
    config = Config()
    if path is not None:
        try:
            with open(path, "rb") as file:
                config = override(config, tomllib.load(file))
        except FileNotFoundError:
            raise LasError(f"config file not found: {path}") from None
        except tomllib.TOMLDecodeError as error:
            raise LasError(f"{path}: invalid TOML: {error}") from None
    return config.replace(list(assignments))


def override(instance: Any, values: dict[str, Any], prefix: str = "") -> Any:
    """A copy of a (nested) frozen dataclass with `values` replacing the named fields."""
    fields = {item.name: item for item in dataclasses.fields(instance)}
    hints = typing.get_type_hints(type(instance))
    changes = {}
    for name, value in values.items():
        key = f"{prefix}{name}"
        if name not in fields:
            known = ", ".join(sorted(f"{prefix}{field}" for field in fields))
            raise LasError(f"unknown config key {key!r} (known: {known})")
        current = getattr(instance, name)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, dict):
                raise LasError(f"config key {key!r} is a section; set its fields, e.g. {key}.<field>=...")
            changes[name] = override(current, value, f"{key}.")
        else:
            changes[name] = _coerce(value, hints[name], key)
    return dataclasses.replace(instance, **changes)


def _coerce(value: Any, kind: Any, key: str) -> Any:
    """Parse a `--set` string (or check a TOML value) against the field's declared type."""
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "1", "yes"):
                return True
            if str(value).lower() in ("false", "0", "no"):
                return False
            raise ValueError
        if kind is int and isinstance(value, float):
            raise ValueError
        return kind(value)
    except (TypeError, ValueError):
        raise LasError(f"config key {key!r}: expected {kind.__name__}, got {value!r}") from None
