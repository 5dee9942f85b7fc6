"""Checkpoints: everything decoding needs (config, vocabulary, normalisation, weights) in one file,
plus the training state that `--resume` restores. Written atomically: write, then rename."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from las.core.config import Config, DecodeConfig
from las.core.errors import LasError
from las.core.files import save_atomically
from las.core.settings import RetiredSetting, assignment_table
from las.core.text import Vocabulary
from las.data.front_end.features import FeatureSet, Normalizer, feature_dimension
from las.model.las import LAS

FORMAT = "las-checkpoint"
VERSION = 1  # bump when the layout below or the model's parameters change incompatibly


# decode.* settings that name a file, and the name an export keeps its copy under (las.export.writer).
FILE_SETTINGS = {"lm": "lm.pt", "lexicon": "lexicon.txt", "stream_second_pass_model": "second_pass.pt"}
# How to decode without each: an LM's path alone is not enough, its weight would ask for it.
WITHOUT = {
    "lm": "decode.lm_weight=0",
    "lexicon": "decode.lexicon=",
    "stream_second_pass_model": "decode.stream_second_pass_model=",
}


@dataclass(frozen=True)
class Checkpoint:
    config: Config
    vocabulary: Vocabulary
    normalizer: Normalizer
    model_state: dict[str, torch.Tensor]
    training_state: dict[str, Any]  # empty for a model-only file
    input_size: int  # feature dimension the model reads
    export: Path | None = None  # an ONNX export folder (las.export.writer) whose graphs hold the weights
    # `decode.*` assignments its makers chose for it (its run's config, `las export --set`),
    # applied before the caller's.
    decoding: tuple[str, ...] = ()

    def decoding_config(self, assignments: list[str] | None = None) -> Config:
        """The saved config with today's `decode.*` defaults, its `decoding` and `assignments` on
        top: a model is decoded as its recipe chose (`decoding`: the run's own `[decode]` settings
        and an export's `--set`), and otherwise as this las decodes, not as the las that trained
        it did. Two more follow the model: `segment_seconds`, the longest stretch it was trained
        to read (a recipe of 25 s utterances decodes them whole, not cut at their pauses as AN4's
        10 s would), and a model without a CTC head gets no joint CTC score by default (asked for,
        it is an error)."""
        defaults = DecodeConfig(segment_seconds=self.config.decode.segment_seconds)
        if self.config.model.ctc_weight == 0:
            defaults = dataclasses.replace(defaults, ctc_weight=0.0)
        config = dataclasses.replace(self.config, decode=defaults).replace([*self.decoding, *(assignments or [])])
        carried = assignment_table(self.decoding).get("decode", {})
        for name in FILE_SETTINGS:  # a file named on the machine that made the model may not be on this one
            path = getattr(config.decode, name)
            unused = name == "lm" and config.decode.lm_weight == 0
            if path and carried.get(name) == path and not unused and not Path(path).exists():
                raise LasError(
                    f"decode.{name}={path}, which the model carries (las info), is not here: "
                    f"give its path with --set decode.{name}=PATH, or decode without it with --set {WITHOUT[name]}"
                )
        return config

    def check_features(self, features: FeatureSet, source: str | Path) -> None:
        """Refuse features of another dimension than the model was trained on."""
        dimension = feature_dimension(features, source)
        if dimension != self.input_size:
            raise LasError(f"{source}: features have {dimension} dimensions, the model reads {self.input_size}")

    def check_weights(self, path: Path) -> None:
        """Refuse weights that are not tensors, not finite (a diverged run) or of another size
        than the normalisation statistics: they could only decode garbage."""
        for name, tensor in self.model_state.items():
            if not isinstance(tensor, torch.Tensor):
                raise LasError(f"{path}: damaged checkpoint: weight {name!r} is not a tensor")
            if tensor.is_floating_point() and not torch.isfinite(tensor).all():
                raise LasError(f"{path}: weight {name!r} is not finite (NaN or infinity): the run diverged")
        if self.normalizer.mean.shape[0] != self.input_size:
            raise LasError(f"{path}: damaged checkpoint: normalisation statistics do not match input_size")

    def build_model(self, device: torch.device | str = "cpu") -> LAS:
        """The model in PyTorch on `device` (an export's `ExportedCheckpoint` runs its graphs)."""
        model = LAS.build(self.config.model, self.input_size, len(self.vocabulary))
        try:
            model.load_state_dict(self.model_state)
        except RuntimeError as error:
            detail = " ".join(str(error).split())[:300]
            raise LasError(f"checkpoint weights do not fit its model settings: {detail}") from None
        return model.to(device).eval()


def save_checkpoint(
    path: str | Path,
    config: Config,
    vocabulary: Vocabulary,
    normalizer: Normalizer,
    model: LAS,
    training_state: dict[str, Any],
) -> None:
    path = Path(path)
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "config": config.to_dict(),
        "vocabulary": vocabulary.to_list(),
        "normalizer": normalizer.to_dict(),
        "model": model.state_dict(),
        "input_size": model.input_size,
        "training": training_state,
        "decoding": list(chosen_decoding(config)),
    }
    save_atomically(path, payload)  # a reader sees the old file or the new one, never half of one


def chosen_decoding(config: Config) -> tuple[str, ...]:
    """The `decode.*` settings a run was given (by its config file or `--set`: those that differ
    from this las's defaults) as assignments: its models are decoded with them by default, as its
    dev pass read them."""
    defaults = DecodeConfig()
    return tuple(
        f"decode.{field.name}={getattr(config.decode, field.name)}"
        for field in dataclasses.fields(DecodeConfig)
        if getattr(config.decode, field.name) != getattr(defaults, field.name)
    )


def unreadable_checkpoint(path: Path, error: Exception) -> str:
    """Why `torch.load` could not read `path`, in a line: not a PyTorch file at all (every file
    torch.save writes is a zip archive), or one damaged or cut short, with the first sentence of
    PyTorch's reason (the rest is advice on `weights_only` and its internals, which misleads)."""
    try:
        with open(path, "rb") as file:
            archive = file.read(4) == b"PK\x03\x04"
    except OSError as failure:  # no permission to read it, a file gone meanwhile
        return f"cannot read the checkpoint: {failure.strerror or failure}"
    if not archive:
        return "not a checkpoint: not a file that PyTorch writes (las train writes best.pt and last.pt)"
    reason = (str(error).splitlines() or [type(error).__name__])[0].split(". ")[0]
    return f"a damaged or cut-short checkpoint (an interrupted copy?): {type(error).__name__}: {reason}"


def load_checkpoint(path: str | Path) -> Checkpoint:
    """A checkpoint written by `las train` (an export folder too: `las.export.runtime.load_model`)."""
    path = Path(path)
    if not path.is_file():
        raise LasError(f"checkpoint not found: {path}")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # torch.load fails on foreign or damaged files in many ways
        raise LasError(f"{path}: {unreadable_checkpoint(path, error)}") from None
    if is_weights_only(payload):
        return snapshot_checkpoint(path, payload)
    check_format(payload, (FORMAT, VERSION), path, "checkpoint", "decode it with the las that wrote it or retrain")
    try:
        checkpoint = payload_checkpoint(payload, dict(payload["model"]), dict(payload["training"]), path)
    except KeyError as error:
        raise LasError(f"{path}: damaged checkpoint: {error.args[0]!r} is missing") from None
    checkpoint.check_weights(path)
    return checkpoint


def is_weights_only(payload: Any) -> bool:
    """Whether `payload` is a bare state dict, as an epoch's snapshot is (las.training.averaging)."""
    tensors = isinstance(payload, dict) and all(isinstance(value, torch.Tensor) for value in payload.values())
    return tensors and bool(payload)


def snapshot_checkpoint(path: Path, weights: dict[str, torch.Tensor]) -> Checkpoint:
    """An epoch's snapshot (`RUN/snapshots/epoch_NNN.pt`: weights only) as a model: its run's
    settings, vocabulary and normalisation (from last.pt, else best.pt) with these weights, so
    that any kept epoch decodes as its run's checkpoints do."""
    run = path.parent.parent
    settings = [run / name for name in ("last.pt", "best.pt") if (run / name).is_file()]
    if path.parent.name != "snapshots" or not settings:
        raise LasError(
            f"{path}: a model's weights without its settings; an epoch's snapshot decodes where its "
            "run left it (RUN/snapshots/, beside RUN/best.pt)"
        )
    checkpoint = load_checkpoint(settings[0])
    kept = kept_epochs(checkpoint) if settings[0].name == "last.pt" else None  # best.pt's list is older
    if kept is not None and snapshot_epoch(path) not in kept:
        listed = ", ".join(map(str, sorted(kept))) or "none"
        raise LasError(
            f"{path}: not a snapshot its run kept ({settings[0]} lists epochs: {listed}); "
            "a snapshot decodes in the run that wrote it"
        )
    snapshot = dataclasses.replace(checkpoint, model_state=weights, training_state={})
    snapshot.check_weights(path)
    return snapshot


def kept_epochs(checkpoint: Checkpoint) -> set[int] | None:
    """The epochs whose snapshots a run's checkpoint lists (`Progress.snapshots`: (dev CER, epoch)
    pairs); None where it lists none at all, as runs from before averaging do."""
    snapshots = checkpoint.training_state.get("progress", {}).get("snapshots")
    return None if snapshots is None else {int(epoch) for _, epoch in snapshots}


def snapshot_epoch(path: Path) -> int | None:
    """The epoch in a snapshot's name (`epoch_NNN.pt`); None for any other name."""
    digits = path.stem.removeprefix("epoch_")
    return int(digits) if path.stem.startswith("epoch_") and digits.isdigit() else None


def check_format(payload: Any, expected: tuple[str, int], where: Path, kind: str, remedy: str) -> None:
    """Refuse a `payload` that is not a las `kind` of the `expected` (format, version)."""
    name, version = expected
    if not isinstance(payload, dict) or payload.get("format") != name:
        raise LasError(f"{where}: not a las {kind}")
    if payload.get("version") != version:
        raise LasError(
            f"{where}: {kind} format version {payload.get('version')} is not supported by this las "
            f"(version {version}); {remedy}"
        )


def payload_checkpoint(
    payload: dict[str, Any],
    model_state: dict[str, torch.Tensor],
    training_state: dict[str, Any],
    path: Path,
    export: Path | None = None,
    kind: type[Checkpoint] = Checkpoint,
) -> Checkpoint:
    """The settings, vocabulary and normalisation of a checkpoint's (or an export's) `payload`,
    with these weights, as a `kind`; one clear error where they are damaged."""
    try:
        return kind(
            Config.from_dict(payload["config"]),
            Vocabulary.from_list(payload["vocabulary"]),
            Normalizer.from_dict(payload["normalizer"]),
            model_state,
            training_state,
            int(payload.get("input_size", payload["config"]["features"]["mel_bins"])),
            export,
            decoding_assignments(payload.get("decoding", [])),
        )
    except KeyError as error:
        raise LasError(f"{path}: damaged checkpoint: {error.args[0]!r} is missing") from None
    except (TypeError, ValueError, AttributeError) as error:
        raise LasError(f"{path}: damaged checkpoint: {error}") from None
    except RetiredSetting as error:  # not damaged: made by a las with a setting this one lacks
        raise LasError(f"{path}: {error}") from None
    except LasError as error:
        raise LasError(f"{path}: damaged checkpoint: {error}") from None


def decoding_assignments(values: object) -> tuple[str, ...]:
    """`decode.KEY=VALUE` strings, and nothing else: the settings a model is decoded with by default."""
    if not isinstance(values, list | tuple) or not all(isinstance(value, str) for value in values):
        raise LasError("its decoding settings are not a list of KEY=VALUE strings")
    others = [value for value in values if not value.startswith("decode.")]
    if others:
        raise LasError(f"{others[0]}: a model is decoded with decode.* settings only")
    return tuple(values)
