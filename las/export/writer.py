"""`las export CHECKPOINT OUT/`: a trained model as ONNX graphs that ONNX Runtime runs without
PyTorch's autograd or Python model code: the listener, the CTC head, and the speller's first state
(a Transformer speller: its memory's projections) and one step, with the state (each layer's cache
of keys and values) explicit in and out. The search stays in host code (las.export.runtime):
a whole decoding loop does not export (pytorch issues 42404, 88801), and every strategy, the CTC
prefix scorer, word times and confidences then work on an export as on a checkpoint.

OUT/ holds the graphs and `model.json`: the checkpoint without its weights (config, vocabulary,
normalisation), the format's version, and each graph's SHA-256, so a damaged or foreign folder
is refused before a graph is run. A file its decoding names (an LM, a lexicon, a second-pass
model) is copied in beside them, so that the folder decodes as it did wherever it is taken.
`--quantize int8` stores the matrix products' weights as int8 (dynamic quantisation: activations
quantised per batch at run time).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
import warnings
from pathlib import Path

import torch
from torch import nn

from las.core.errors import LasError
from las.core.files import locked_directory, make_directory, write_text_atomically
from las.core.progress import say
from las.core.settings import assignment_table
from las.model.checkpoint import FILE_SETTINGS, Checkpoint, decoding_assignments
from las.model.las import LAS
from las.model.listener import ListenerOutput
from las.model.speller import SpellerState
from las.model.transformer_speller import CrossMemory, TransformerSpeller, TransformerState

FORMAT = "las-onnx"
VERSION = 1  # bump when the graphs' inputs and outputs or model.json change incompatibly
MANIFEST = "model.json"
GRAPHS = ("listener.onnx", "ctc_head.onnx", "speller_start.onnx", "speller_memory.onnx", "speller_step.onnx")
OPSET = 17
EXTRA = "onnx and onnxruntime are not installed: pip install 'las[export]'"


def onnx_modules():  # noqa: ANN201 - the optional modules, or one clear error
    try:
        import onnx
        import onnxruntime
    except ImportError:
        raise LasError(EXTRA) from None
    return onnx, onnxruntime


def state_names(layers: int) -> list[str]:
    """The speller state's tensors in the order SpellerState flattens them."""
    return (
        [f"hidden_{layer}" for layer in range(layers)]
        + [f"cell_{layer}" for layer in range(layers)]
        + [
            "context",
            "weights",
            "history",
        ]
    )


def cache_names(layers: int) -> tuple[list[str], list[str]]:
    """A Transformer speller step's inputs besides tokens and mask: each layer's cached
    self-attention keys and values, and each layer's cross-attention keys and values."""
    own = [f"self_{kind}_{layer}" for kind in ("keys", "values") for layer in range(layers)]
    return own, [f"cross_{kind}_{layer}" for kind in ("keys", "values") for layer in range(layers)]


def flatten(state: SpellerState) -> tuple[torch.Tensor, ...]:
    return (*state.hidden, *state.cell, state.context, state.weights, state.history)


def unflatten(tensors: tuple[torch.Tensor, ...] | list[torch.Tensor], layers: int) -> SpellerState:
    return SpellerState(
        tuple(tensors[:layers]), tuple(tensors[layers : 2 * layers]), tensors[-3], tensors[-2], tensors[-1]
    )


class ListenerGraph(nn.Module):
    """features `(batch, frames, input)`, lengths `(batch,)` -> keys, values, hidden, lengths."""

    def __init__(self, model: LAS) -> None:
        super().__init__()
        self.listener = model.listener

    def forward(self, features: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, ...]:
        memory = self.listener(features, lengths)
        return memory.keys, memory.values, memory.hidden, memory.lengths


class SpellerStartGraph(nn.Module):
    """values `(batch, frames, value)`, mask `(batch, frames)` -> the first state, flattened."""

    def __init__(self, model: LAS) -> None:
        super().__init__()
        self.speller = model.speller

    def forward(self, values: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        lengths = mask.sum(dim=1)
        memory = ListenerOutput(values, values, mask, lengths, values)
        return flatten(self.speller.initial_state(memory))


class SpellerStepGraph(nn.Module):
    """tokens `(rows,)`, the state, keys, values, mask -> logits `(rows, vocabulary)` and the next state."""

    def __init__(self, model: LAS) -> None:
        super().__init__()
        self.speller = model.speller
        self.layers = len(model.speller.cells)

    def forward(self, tokens: torch.Tensor, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        *state, keys, values, mask = inputs
        memory = ListenerOutput(keys, values, mask, mask.sum(dim=1), values)
        logits, after = self.speller.step(tokens, unflatten(state, self.layers), memory)
        return (logits, *flatten(after))


class TransformerMemoryGraph(nn.Module):
    """keys `(rows, frames, key)`, values `(rows, frames, value)` -> each layer's cross-attention
    keys, then values `(rows, heads, frames, dim / heads)`: projected once per utterance."""

    def __init__(self, model: LAS) -> None:
        super().__init__()
        self.speller = model.speller

    def forward(self, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        mask = torch.ones(keys.shape[:2], dtype=torch.bool)  # projecting reads no mask
        cross = self.speller.prepare(ListenerOutput(keys, values, mask, mask.sum(dim=1), values))
        return (*cross.keys, *cross.values)


class TransformerStepGraph(nn.Module):
    """tokens `(rows,)`, each layer's cached self-attention keys and values `(rows, heads,
    characters, dim / heads)`, its cross-attention keys and values, mask `(rows, frames)` ->
    logits `(rows, vocabulary)`, the caches one character longer, the attention `(rows, frames)`."""

    def __init__(self, model: LAS) -> None:
        super().__init__()
        self.speller = model.speller
        self.layers = len(model.speller.layers)

    def forward(self, tokens: torch.Tensor, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        layers, mask = self.layers, inputs[-1]
        own, cross = inputs[: 2 * layers], inputs[2 * layers : 4 * layers]
        memory = CrossMemory(cross[:layers], cross[layers:], mask, mask.sum(dim=1))
        state = TransformerState(own[:layers], own[layers:], mask.float())  # a step reads no weights
        logits, after = self.speller.step(tokens, state, memory)
        return (logits, *after.keys, *after.values, after.weights)


def export_graph(module: nn.Module, inputs: tuple, path: Path, names: tuple[list[str], list[str]], axes: dict) -> None:
    """`module` as an ONNX graph at `path` through the TorchScript exporter, whose dynamic axes
    keep one graph for every batch and length (LSTMs become ONNX LSTM operators)."""
    input_names, output_names = names
    wanted = {name: axis for name, axis in axes.items() if name in input_names or name in output_names}
    with warnings.catch_warnings():  # the exporter's advice on LSTM batch sizes and constant folding
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            inputs,
            str(path),
            input_names=input_names,
            output_names=output_names,
            dynamic_axes=wanted,
            opset_version=OPSET,
            dynamo=False,
        )


def export(checkpoint: Checkpoint, out: Path, quantize: str = "", decoding: tuple[str, ...] = ()) -> Path:
    """Write the graphs of `checkpoint` and its `model.json` into `out`; `decoding`: `decode.*`
    assignments the export is decoded with unless its caller says otherwise, on top of those its
    run was given (its recipe's). `checkpoint` may be an export: its graphs are copied as they
    are (int8 stays int8), so that its decoding (an LM, a lexicon, weights) can change without
    the checkpoint it was made from."""
    onnx_modules()
    source = checkpoint.export
    if source is not None and out.resolve() == Path(source).resolve():
        raise LasError(f"{out}: the export being read; write the new one into another folder")
    checkpoint = dataclasses.replace(checkpoint, decoding=decoding_assignments([*checkpoint.decoding, *decoding]))
    files = named_files(checkpoint.decoding)
    # A setting that does not parse, or a decoding that could not run, is refused before anything is written.
    checkpoint.decoding_config().decode.check_language_model()
    if checkpoint.config.model.attention in ("monotonic", "monotonic_chunk"):
        raise LasError(f"model.attention={checkpoint.config.model.attention} cannot be exported yet (hard attention)")
    others = sorted(path.name for path in out.iterdir() if not export_file(path.name)) if out.is_dir() else []
    if others:
        raise LasError(f"{out}: a folder with other files in it ({others[0]}); export into a new or an export's folder")
    make_directory(out, "export folder")
    with locked_directory(out):  # a second export into the same folder waits for none: one clear error
        (out / MANIFEST).unlink(missing_ok=True)  # until the new graphs are written, no export is here
        checkpoint = bundled(checkpoint, files, out)
        if source is None:
            write_export(checkpoint, out, quantize)
        else:
            copy_export(checkpoint, Path(source), out, quantize)
    return out


def named_files(decoding: tuple[str, ...]) -> dict[str, Path]:
    """Setting -> the file that `decoding` names for it (the last word on each); one clear error
    for a file that is not here, before anything is written. A second-pass model that is an
    export folder stays where it is, named by its path."""
    settings = assignment_table(decoding).get("decode", {})
    files = {name: Path(settings[name]) for name in FILE_SETTINGS if settings.get(name)}
    files = {name: path for name, path in files.items() if not path.is_dir()}
    for name, path in files.items():
        if not path.is_file():
            raise LasError(
                f"decode.{name}={path}: no such file, and an export carries a copy of it: give its path with "
                f"--set decode.{name}=PATH, or export without it with --set decode.{name}="
            )
    return files


def bundled(checkpoint: Checkpoint, files: dict[str, Path], out: Path) -> Checkpoint:
    """`checkpoint` decoding with copies of `files` in `out`, named by the export's names for them
    (las.export.runtime resolves those against the folder it loads)."""
    named = {f"decode.{name}" for name in files}
    kept = [assignment for assignment in checkpoint.decoding if assignment.partition("=")[0].strip() not in named]
    for name, copy in FILE_SETTINGS.items():  # an earlier export's copies go, this one's come
        (out / copy).unlink(missing_ok=True)
        if name in files:
            shutil.copyfile(files[name], out / copy)
    copies = [f"decode.{name}={FILE_SETTINGS[name]}" for name in files]
    return dataclasses.replace(checkpoint, decoding=(*kept, *copies))


def export_file(name: str) -> bool:
    """Whether a file of this name is an export's own (or left by an export cut short)."""
    return name in (*GRAPHS, *FILE_SETTINGS.values(), MANIFEST, ".lock") or name.endswith((".tmp", ".int8.onnx"))


def write_export(checkpoint: Checkpoint, out: Path, quantize: str) -> None:
    model = checkpoint.build_model("cpu")
    batch, frames = 2, 37
    features = torch.randn(batch, frames, checkpoint.input_size)
    lengths = torch.tensor([frames, frames - 6])
    with torch.no_grad():
        memory = model.listener(features, lengths)
    per_batch = {"features": {0: "batch", 1: "frames"}, "lengths": {0: "batch"}}
    per_batch |= {name: {0: "batch", 1: "encoder_frames"} for name in ("keys", "values", "hidden")}
    export_graph(
        ListenerGraph(model),
        (features, lengths),
        out / "listener.onnx",
        (["features", "lengths"], ["keys", "values", "hidden", "encoder_lengths"]),
        per_batch | {"encoder_lengths": {0: "batch"}},
    )
    graphs = ["listener.onnx"]
    if model.ctc_head is not None:
        export_graph(
            model.ctc_head,
            (memory.hidden,),
            out / "ctc_head.onnx",
            (["hidden"], ["logits"]),
            {"hidden": {0: "batch", 1: "encoder_frames"}, "logits": {0: "batch", 1: "encoder_frames"}},
        )
        graphs.append("ctc_head.onnx")
    if isinstance(model.speller, TransformerSpeller):
        graphs += write_transformer_speller(model, memory, out)
    else:
        graphs += write_lstm_speller(model, memory, out)
    if quantize:
        quantize_graphs(out, graphs)
    write_manifest(checkpoint, out, graphs, quantize)
    say(f"exported {', '.join(graphs)} ({'int8' if quantize else 'fp32'}) to {out}")


def copy_export(checkpoint: Checkpoint, source: Path, out: Path, quantize: str) -> None:
    """The graphs of the export at `source` (which load_export has checked) into `out` as they
    are, fp32 ones made int8 where `quantize` asks; the manifest of `checkpoint`'s settings."""
    manifest = json.loads((source / MANIFEST).read_text())
    graphs = list(manifest["graphs"])
    for graph in graphs:
        shutil.copyfile(source / graph, out / graph)
        if digest(out / graph) != manifest["graphs"][graph]:  # changed since it was checked: not to be blessed
            raise LasError(f"{source}: damaged export: {graph} is not the file that was exported")
    stored = manifest.get("quantize", "")
    if quantize and not stored:
        quantize_graphs(out, graphs)
    write_manifest(checkpoint, out, graphs, quantize or stored)
    say(f"copied {', '.join(graphs)} ({'int8' if quantize or stored else 'fp32'}) from {source} to {out}")


# Three rows from two utterances, as beam search makes them, reading these tokens.
ROWS, TOKENS = torch.tensor([0, 1, 1]), torch.tensor([1, 5, 7])


def write_lstm_speller(model: LAS, memory: ListenerOutput, out: Path) -> list[str]:
    """The LSTMCell speller's first state and one step, its state explicit in and out."""
    names = state_names(len(model.speller.cells))
    start = model.speller.initial_state(memory)
    # The history is per frame, or (GMM attention) per mixture: fixed.
    history_per_frame = start.history.shape[1] == memory.mask.shape[1]
    per_frame = ["weights", "values", "keys", "mask"] + (["history"] if history_per_frame else [])
    row_axes = {name: {0: "rows"} for name in names}
    row_axes |= {name: {0: "rows", 1: "encoder_frames"} for name in per_frame}
    export_graph(
        SpellerStartGraph(model),
        (memory.values, memory.mask),
        out / "speller_start.onnx",
        (["values", "mask"], names),
        row_axes,
    )
    state, memory_rows = start.select(ROWS), memory.select(ROWS)
    output_names = ["logits"] + [f"next_{name}" for name in names]
    step_axes = row_axes | {"tokens": {0: "rows"}, "logits": {0: "rows"}}
    step_axes |= {f"next_{name}": row_axes[name] for name in names}
    export_graph(
        SpellerStepGraph(model),
        (TOKENS, *flatten(state), memory_rows.keys, memory_rows.values, memory_rows.mask),
        out / "speller_step.onnx",
        (["tokens", *names, "keys", "values", "mask"], output_names),
        step_axes,
    )
    return ["speller_start.onnx", "speller_step.onnx"]


def write_transformer_speller(model: LAS, memory: ListenerOutput, out: Path) -> list[str]:
    """The Transformer speller's memory projections and one step, its caches explicit in and out
    (traced after three characters, so that the step reads a cache it grows)."""
    speller = model.speller
    own, cross = cache_names(len(speller.layers))
    cross_axes = {name: {0: "rows", 2: "encoder_frames"} for name in cross}
    export_graph(
        TransformerMemoryGraph(model),
        (memory.keys, memory.values),
        out / "speller_memory.onnx",
        (["keys", "values"], cross),
        cross_axes | {name: {0: "rows", 1: "encoder_frames"} for name in ("keys", "values")},
    )
    prepared = speller.prepare(memory).select(ROWS)
    state = speller.initial_state(prepared)
    for token in (1, 4, 6):
        _, state = speller.step(torch.full((len(ROWS),), token), state, prepared)
    step_axes = cross_axes | {name: {0: "rows", 2: "characters"} for name in own}
    step_axes |= {f"next_{name}": {0: "rows", 2: "next_characters"} for name in own}
    step_axes |= {name: {0: "rows"} for name in ("tokens", "logits")}
    step_axes |= {name: {0: "rows", 1: "encoder_frames"} for name in ("mask", "weights")}
    export_graph(
        TransformerStepGraph(model),
        (TOKENS, *state.keys, *state.values, *prepared.keys, *prepared.values, prepared.mask),
        out / "speller_step.onnx",
        (["tokens", *own, *cross, "mask"], ["logits", *(f"next_{name}" for name in own), "weights"]),
        step_axes,
    )
    return ["speller_memory.onnx", "speller_step.onnx"]


def quantize_graphs(out: Path, graphs: list[str]) -> None:
    """Dynamic int8 of the matrix products (MatMul, Gemm, LSTM) in place."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # its notes on tensors it leaves in float (lengths, masks)
    try:
        for graph in graphs:
            path = out / graph
            quantized = path.with_suffix(".int8.onnx")
            quantize_dynamic(str(path), str(quantized), weight_type=QuantType.QInt8)
            quantized.replace(path)
    finally:
        root.setLevel(level)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def summary(progress: dict) -> dict:
    """The numbers of a run's progress (epoch, step, best dev CER), not its tensors."""
    return {name: value for name, value in progress.items() if isinstance(value, (int, float, str))}


def write_manifest(checkpoint: Checkpoint, out: Path, graphs: list[str], quantize: str) -> None:
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "config": checkpoint.config.to_dict(),
        "vocabulary": checkpoint.vocabulary.to_list(),
        "normalizer": checkpoint.normalizer.to_dict(),
        "input_size": checkpoint.input_size,
        "speller_layers": checkpoint.config.model.speller_layers,
        "quantize": quantize,
        "training": {"progress": summary(checkpoint.training_state.get("progress", {}))},  # for las info
        "decoding": list(checkpoint.decoding),
        "graphs": {graph: digest(out / graph) for graph in graphs},
        "files": {name: digest(out / name) for name in bundled_names(checkpoint.decoding)},
    }
    manifest["check"] = manifest_check(manifest)
    write_text_atomically(out / MANIFEST, json.dumps(manifest, indent=1))


def bundled_names(decoding: tuple[str, ...] | list[str]) -> list[str]:
    """The files in an export's folder that its `decoding` names (`bundled`)."""
    settings = assignment_table(list(decoding)).get("decode", {})
    return [copy for name, copy in FILE_SETTINGS.items() if settings.get(name) == copy]


def manifest_check(manifest: dict) -> str:
    """The SHA-256 of a manifest's fields (all but `check`): an edited normalisation or vocabulary
    would decode every recording wrongly without an error."""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()
