"""An exported model (las.export.writer) run by ONNX Runtime behind the interface of `LAS`: a listener,
a CTC head and a speller with `initial_state` and `step`, so that every decoding strategy, the CTC
prefix scorer, word times and confidences run on it unchanged. Tensors cross as CPU arrays."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from las.core.config import ModelConfig
from las.core.errors import LasError
from las.export.writer import (
    FORMAT,
    MANIFEST,
    VERSION,
    cache_names,
    digest,
    flatten,
    manifest_check,
    onnx_modules,
    state_names,
    unflatten,
)
from las.model.checkpoint import Checkpoint, check_format, load_checkpoint, payload_checkpoint
from las.model.las import LAS
from las.model.listener import ListenerOutput, length_mask
from las.model.speller import SpellerState
from las.model.transformer_speller import CrossMemory, TransformerState, empty_state


def load_model(path: str | Path) -> Checkpoint:
    """A checkpoint written by `las train`, or an export folder written by `las export`."""
    return load_export(path) if Path(path).is_dir() else load_checkpoint(path)


class ExportedCheckpoint(Checkpoint):
    """An export's settings, vocabulary and normalisation, whose weights are in its graphs."""

    def build_model(self, device: torch.device | str = "cpu") -> LAS:
        return ExportedModel(self.export, self)  # type: ignore[return-value]: it decodes as LAS does


def load_export(folder: str | Path) -> Checkpoint:
    """The checkpoint an export folder was written from, without its weights: one clear error for a
    folder that is not an export, from another version of it, or damaged."""
    folder = Path(folder)
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise LasError(f"{folder}: not a las export (no {MANIFEST}); export one with `las export CHECKPOINT {folder}`")
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise LasError(f"{manifest_path}: damaged export: {error}") from None
    check_format(manifest, (FORMAT, VERSION), folder, "export", "export the checkpoint again")
    if manifest.pop("check", None) != manifest_check(manifest):  # settings edited: they would decode wrongly
        raise LasError(f"{manifest_path}: damaged export: its settings are not those it was exported with")
    graphs = manifest.get("graphs")
    if not isinstance(graphs, dict) or "listener.onnx" not in graphs or "speller_step.onnx" not in graphs:
        raise LasError(f"{manifest_path}: damaged export: its graphs are not listed")
    files = manifest.get("files", {})  # none in an export made before files were carried
    if not isinstance(files, dict):
        raise LasError(f"{manifest_path}: damaged export: its files are not listed")
    for name, expected in {**graphs, **files}.items():
        path = folder / name
        if not path.is_file():
            raise LasError(f"{folder}: damaged export: {name} is missing")
        if digest(path) != expected:
            raise LasError(f"{folder}: damaged export: {name} is not the file that was exported")
    # Its decoding names its own copies of files by their names in the folder, wherever it is.
    manifest["decoding"] = [in_folder(assignment, folder, files) for assignment in manifest.get("decoding", [])]
    training = manifest.get("training") if isinstance(manifest.get("training"), dict) else {}
    return payload_checkpoint(manifest, {}, training, manifest_path, export=folder, kind=ExportedCheckpoint)


def in_folder(assignment: str, folder: Path, files: dict[str, str]) -> str:
    """`decode.lm=lm.pt` as `decode.lm=FOLDER/lm.pt` where lm.pt is one of the export's `files`."""
    key, _, value = assignment.partition("=")
    return f"{key}={folder / value}" if value in files else assignment


def run_on(device: str | torch.device) -> torch.device:
    """Exports decode on the CPU (ONNX Runtime's CPU provider): `auto` is the CPU for them."""
    if str(device) not in ("auto", "cpu"):
        raise LasError(f"--device {device}: an ONNX export decodes on the CPU; decode the checkpoint on a GPU")
    return torch.device("cpu")


class Graph:
    """One ONNX graph in an ONNX Runtime session on this process's threads."""

    def __init__(self, path: Path) -> None:
        _, onnxruntime = onnx_modules()
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1
        # Threads that wait sleep: spinning ones took the cores from PyTorch's, which run the search
        # between the graphs (2 threads on 2 cores: 5.3 s for AN4 dev spinning, 3.5 s not).
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        except Exception as error:  # ONNX Runtime raises its own types for unreadable graphs
            raise LasError(f"{path}: damaged export: {str(error).splitlines()[0]}") from None
        # The exporter leaves out inputs a graph never reads (the step reads the attention history,
        # not the previous weights): each is fed by name, where the graph has it.
        self.inputs = {item.name for item in self.session.get_inputs()}

    def __call__(self, **tensors: torch.Tensor) -> list[torch.Tensor]:
        feed = {
            name: np.ascontiguousarray(tensor.detach().cpu().numpy())
            for name, tensor in tensors.items()
            if name in self.inputs
        }
        return [torch.from_numpy(output) for output in self.session.run(None, feed)]


class ExportedListener:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    def __call__(self, features: torch.Tensor, lengths: torch.Tensor) -> ListenerOutput:
        # features: (batch, frames, input_size); lengths: (batch,)
        keys, values, hidden, encoder_lengths = self.graph(features=features.float(), lengths=lengths.long())
        return ListenerOutput(keys, values, length_mask(encoder_lengths, keys.shape[1]), encoder_lengths, hidden)


class ExportedHead:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.graph(hidden=hidden)[0]  # (batch, frames, vocabulary) logits


class ExportedSpeller:
    def __init__(self, start: Graph, step: Graph, layers: int, attention_dimensions: tuple[int, int]) -> None:
        self.start, self.step_graph, self.layers = start, step, layers
        self.names = state_names(layers)
        self.attention_dimensions = attention_dimensions

    def prepare(self, memory: ListenerOutput) -> ListenerOutput:
        """The memory as every step reads it: as it is, like the LSTMCell speller it was exported from."""
        return memory

    def initial_state(self, memory: ListenerOutput) -> SpellerState:
        return unflatten(self.start(values=memory.values, mask=memory.mask), self.layers)

    def step(
        self, tokens: torch.Tensor, state: SpellerState, memory: ListenerOutput
    ) -> tuple[torch.Tensor, SpellerState]:
        """Logits `(rows, vocabulary)` for the character after `tokens` `(rows,)`, and the new state."""
        state_in = dict(zip(self.names, flatten(state), strict=True))
        logits, *after = self.step_graph(
            tokens=tokens.long(), **state_in, keys=memory.keys, values=memory.values, mask=memory.mask
        )
        return logits, unflatten(after, self.layers)

    def __call__(
        self, memory: ListenerOutput, targets_in: torch.Tensor, teacher_forcing: float = 1.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return teacher_forced(self, memory, targets_in)


class ExportedTransformerSpeller:
    """The Transformer speller of an export: the memory projected once per utterance by one graph,
    each character by another, its caches of keys and values handed in and out."""

    def __init__(self, memory: Graph, step: Graph, config: ModelConfig) -> None:
        self.memory_graph, self.step_graph = memory, step
        self.layers, self.heads = config.speller_layers, config.transformer_heads
        self.dim = config.transformer_speller_dim
        self.own, self.cross = cache_names(self.layers)
        self.attention_dimensions = (config.key_dim, config.value_dim)

    def prepare(self, memory: ListenerOutput | CrossMemory) -> CrossMemory:
        if isinstance(memory, CrossMemory):
            return memory
        projected = self.memory_graph(keys=memory.keys, values=memory.values)
        layers = self.layers
        return CrossMemory(tuple(projected[:layers]), tuple(projected[layers:]), memory.mask, memory.lengths)

    def initial_state(self, memory: ListenerOutput | CrossMemory) -> TransformerState:
        return empty_state(memory, self.layers, self.heads, self.dim)

    def step(
        self, tokens: torch.Tensor, state: TransformerState, memory: ListenerOutput | CrossMemory
    ) -> tuple[torch.Tensor, TransformerState]:
        """Logits `(rows, vocabulary)` for the character after `tokens` `(rows,)`, and the new state."""
        cross = self.prepare(memory)
        feed = dict(zip(self.own, (*state.keys, *state.values), strict=True))
        feed |= dict(zip(self.cross, (*cross.keys, *cross.values), strict=True))
        logits, *caches, weights = self.step_graph(tokens=tokens.long(), **feed, mask=cross.mask)
        return logits, TransformerState(tuple(caches[: self.layers]), tuple(caches[self.layers :]), weights)

    def __call__(
        self, memory: ListenerOutput, targets_in: torch.Tensor, teacher_forcing: float = 1.0
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return teacher_forced(self, memory, targets_in)


def teacher_forced(
    speller: ExportedSpeller | ExportedTransformerSpeller, memory: ListenerOutput, targets_in: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Teacher-forced logits `(rows, steps, vocabulary)` and attention `(rows, steps, frames)`,
    one step graph at a time (confidences rescore hypotheses this way)."""
    memory = speller.prepare(memory)
    state, logits, weights = speller.initial_state(memory), [], []
    for step in range(targets_in.shape[1]):
        step_logits, state = speller.step(targets_in[:, step], state, memory)
        logits.append(step_logits)
        weights.append(state.weights)
    return torch.stack(logits, dim=1), torch.stack(weights, dim=1)


class ExportedModel:
    """What decoding asks of `LAS`, answered by the graphs of an export folder."""

    training = False

    def __init__(self, folder: Path, checkpoint: Checkpoint) -> None:
        model = checkpoint.config.model
        self.input_size = checkpoint.input_size
        self.listener = ExportedListener(Graph(folder / "listener.onnx"))
        head = folder / "ctc_head.onnx"
        self.ctc_head = ExportedHead(Graph(head)) if head.is_file() else None
        step = Graph(folder / "speller_step.onnx")
        self.speller: ExportedSpeller | ExportedTransformerSpeller
        if model.speller == "transformer":
            self.speller = ExportedTransformerSpeller(Graph(folder / "speller_memory.onnx"), step, model)
        else:
            start = Graph(folder / "speller_start.onnx")
            self.speller = ExportedSpeller(start, step, model.speller_layers, (model.key_dim, model.value_dim))

    def eval(self) -> ExportedModel:
        return self

    def train(self, mode: bool = True) -> ExportedModel:
        return self

    def parameters(self) -> Iterator[torch.Tensor]:
        """Where its tensors live (decoding asks the first parameter): the CPU."""
        yield torch.zeros(0)
