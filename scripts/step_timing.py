"""One training step, or one beam search, of the default model, timed in a process of its own.

`python scripts/benchmark.py step` (and `step --beam`) runs this once per variant and round, so that
variants share nothing but the batch file: las as it is, las at another commit (`--source`, a
worktree of it), and the same model built from SpeechBrain's modules (`--model speechbrain`).
Each prints JSON: seconds per step (the median of `--steps`), and for a las training step the
parts of the step and their FLOPs; with `--beam`, seconds per utterance and search step of beam 8
forced to run BEAM_STEPS steps, with and without CTC.

SpeechBrain is an optional benchmark dependency (`pip install -e ".[benchmark]"`), never a runtime one.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
import typer
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

FORCING = 0.9  # the teacher-forcing rate of most of a default run
MATMUL = 1024
BEAM, BEAM_STEPS = 8, 40


def seconds(work: Callable[[], object], repeats: int) -> float:
    """Median wall time of `work` over `repeats` calls, after one warm-up call."""
    work()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def flops(work: Callable[[], object], model: nn.Module) -> int:
    """Floating-point operations of the matrix products, convolutions and LSTMs `work` runs.
    PyTorch's counter does not see inside oneDNN's LSTM: an LSTM layer is counted as 8·H·(I + H)
    per frame and direction forward, and twice that backward."""
    recurrent = 0

    def count(module: nn.LSTM, inputs: tuple, _: object) -> None:
        nonlocal recurrent
        x = inputs[0]
        frames = x.data.shape[0] if isinstance(x, torch.nn.utils.rnn.PackedSequence) else x.shape[0] * x.shape[1]
        directions = 2 if module.bidirectional else 1
        size = module.hidden_size
        for layer in range(module.num_layers):
            inputs_size = module.input_size if layer == 0 else size * directions
            recurrent += 3 * 8 * size * (inputs_size + size) * frames * directions

    hooks = [module.register_forward_hook(count) for module in model.modules() if isinstance(module, nn.LSTM)]
    try:
        with FlopCounterMode(display=False) as counter:
            work()
    finally:
        for hook in hooks:
            hook.remove()
    return counter.get_total_flops() + recurrent


def matmul_rate(repeats: int) -> float:
    """GFLOP/s of a 1024³ float32 matrix product: what this machine's BLAS reaches on the threads given."""
    a, b = torch.randn(MATMUL, MATMUL), torch.randn(MATMUL, MATMUL)
    return 2 * MATMUL**3 / seconds(lambda: a @ b, repeats) / 1e9


class SpeechBrainLAS(nn.Module):
    """las's default model from SpeechBrain's modules: a BLSTM and two pyramid BLSTMs of 160 units
    per direction (frames paired between layers as las does, SpeechBrain having no pyramid),
    SpeechBrain's AttentionalRNNDecoder (one LSTM of 256, location attention of 128 dimensions,
    10 channels, kernel 15), a 128-dimensional embedding and las's output MLP and CTC head."""

    def __init__(self, input_size: int, vocabulary: int) -> None:
        super().__init__()
        from speechbrain.nnet.RNN import LSTM, AttentionalRNNDecoder

        hidden = 160
        sizes = [input_size] + [4 * hidden] * 2
        self.encoder = nn.ModuleList(LSTM(hidden, input_size=size, bidirectional=True) for size in sizes)
        self.dropout = nn.Dropout(0.2)
        self.embedding = nn.Embedding(vocabulary, 128)
        self.decoder = AttentionalRNNDecoder(
            "lstm", "location", 256, 128, 1, 2 * hidden, 128, channels=10, kernel_size=15, dropout=0.2
        )
        self.bottleneck = nn.Linear(256, 128)
        self.output = nn.Linear(128, vocabulary)
        self.ctc_head = nn.Linear(2 * hidden, vocabulary)

    def encode(self, features: torch.Tensor) -> torch.Tensor:
        x = features
        for index, layer in enumerate(self.encoder):
            if index:
                x = self.dropout(x)
                x = F.pad(x, (0, 0, 0, x.shape[1] % 2))
                x = x.reshape(x.shape[0], x.shape[1] // 2, 2 * x.shape[2])
            x = layer(x)[0]
        return x

    def loss(
        self,
        features: torch.Tensor,  # (batch, frames, mel_bins)
        lengths: torch.Tensor,  # (batch,)
        targets_in: torch.Tensor,  # (batch, steps): <sos> then characters
        targets_out: torch.Tensor,  # (batch, steps): characters then <eos>
        target_lengths: torch.Tensor,  # (batch,) with <eos>
    ) -> torch.Tensor:
        """The joint loss as las computes it: 0.5 CTC + 0.5 label-smoothed cross-entropy."""
        x = self.encode(features)
        relative = lengths.float() / features.shape[1]
        encoder_lengths = torch.ceil(relative * x.shape[1]).long()
        decoded, _ = self.decoder(self.embedding(targets_in), x, relative)
        logits = self.output(torch.tanh(self.bottleneck(decoded)))
        attention = F.cross_entropy(logits.transpose(1, 2), targets_out, ignore_index=0, label_smoothing=0.1)
        log_probs = self.ctc_head(x).log_softmax(dim=-1).transpose(0, 1)
        ctc = F.ctc_loss(log_probs, targets_in[:, 1:], encoder_lengths, target_lengths - 1, zero_infinity=True)
        return 0.5 * attention + 0.5 * ctc


class OutputLayer(nn.Module):
    """The output MLP as SpeechBrain's searcher wants its output layer: the last linear map as `w`."""

    def __init__(self, model: SpeechBrainLAS) -> None:
        super().__init__()
        self.bottleneck, self.w = model.bottleneck, model.output

    def forward(self, decoded: torch.Tensor) -> torch.Tensor:
        return self.w(torch.tanh(self.bottleneck(decoded)))


def las_parts(model: nn.Module, batch: dict[str, torch.Tensor]) -> dict[str, Callable[[], object]]:
    """The step, and its parts each with its own backward pass: the listener (gradients of its
    outputs given), the speller loop and its loss (from a fixed listener output), the CTC head and
    loss, and the optimizer (clipping and Adam)."""
    from las.model.losses import attention_loss, ctc_loss, joint_loss

    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    features, feature_lengths = batch["features"], batch["feature_lengths"]
    targets_in, targets_out, target_lengths = batch["targets_in"], batch["targets_out"], batch["target_lengths"]

    def step() -> None:
        output = model(features, feature_lengths, targets_in, FORCING)
        loss, _ = joint_loss(output, targets_in, targets_out, target_lengths, 0.5, 0.1)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()

    memory = model.listener(features, feature_lengths)
    fixed = memory._replace(**{name: getattr(memory, name).detach().requires_grad_() for name in ("keys", "values")})
    hidden = memory.hidden.detach().requires_grad_()
    cotangents = [torch.randn_like(tensor) for tensor in (memory.keys, memory.values, memory.hidden)]

    def listener() -> None:
        heard = model.listener(features, feature_lengths)
        torch.autograd.backward([heard.keys, heard.values, heard.hidden], cotangents)

    def speller() -> None:
        logits, _ = model.speller(fixed, targets_in, FORCING)
        attention_loss(logits, targets_out, 0.1).backward()

    def ctc() -> None:
        log_probs = model.ctc_head(hidden).log_softmax(dim=-1).transpose(0, 1)
        ctc_loss(log_probs, memory.lengths, targets_in[:, 1:], target_lengths - 1).backward()

    step()  # every parameter has a gradient for the optimizer part

    def update() -> None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
        optimizer.step()

    return {"step": step, "listener": listener, "speller loop": speller, "CTC": ctc, "optimizer": update}


def las_beam(model: nn.Module, features: torch.Tensor, symbols: list[str], ctc_weight: float) -> Callable[[], object]:
    """Beam search of BEAM_STEPS steps on every utterance (the length rules allow <eos> at that
    step only), as `las decode` runs it."""
    from las.core.config import DecodeConfig
    from las.core.text import Vocabulary
    from las.search import build_strategy

    lengths = torch.full((len(features),), features.shape[1])
    memory = model.listener(features, lengths)
    frames = float(memory.lengths[0])
    config = DecodeConfig(
        strategy="beam",
        beam_size=BEAM,
        ctc_weight=ctc_weight,
        ctc_length_ratio=0,
        min_length_ratio=(BEAM_STEPS - 0.5) / frames,  # <eos> no earlier than step BEAM_STEPS
        max_length_ratio=(BEAM_STEPS - 5.5) / frames,  # and there at the latest
    )
    strategy = build_strategy(config, Vocabulary(tuple(symbols)), model)
    return lambda: strategy.search(model, model.listener(features, lengths))


def speechbrain_beam(model: SpeechBrainLAS, features: torch.Tensor, ctc_weight: float) -> Callable[[], object]:
    """SpeechBrain's S2SRNNBeamSearcher (with its CTCScorer) on the same model, BEAM_STEPS steps."""
    from speechbrain.decoders.scorer import CTCScorer, ScorerBuilder
    from speechbrain.decoders.seq2seq import S2SRNNBeamSearcher

    frames = model.encode(features).shape[1]
    scorer = None
    if ctc_weight > 0:
        ctc = CTCScorer(model.ctc_head, blank_index=0, eos_index=2)
        scorer = ScorerBuilder(full_scorers=[ctc], weights={"ctc": ctc_weight})
    output = OutputLayer(model)
    ratio = BEAM_STEPS / frames
    searcher = S2SRNNBeamSearcher(
        model.embedding,
        model.decoder,
        output,
        bos_index=1,
        eos_index=2,
        min_decode_ratio=ratio,
        max_decode_ratio=ratio,
        beam_size=BEAM,
        scorer=scorer,
        using_eos_threshold=False,
    )
    relative = torch.ones(len(features))
    return lambda: searcher(model.encode(features), relative)


def main(
    batch_file: Path,
    model_name: str = typer.Option("las", "--model"),
    source: Path | None = None,
    steps: int = 5,
    threads: int = 1,
    parts: bool = False,
    beam: bool = False,
    setting: list[str] = typer.Option([], "--set", help="A model setting, e.g. model.listener=conformer."),
) -> None:
    """Print JSON: seconds per step, parameters, and with --parts every part's seconds and FLOPs;
    with --beam, seconds per utterance-step of beam search with and without CTC."""
    torch.set_num_threads(threads)
    if source is not None:
        sys.path.insert(0, str(source.resolve()))
    batch = torch.load(batch_file)
    input_size, vocabulary = batch["features"].shape[2], len(batch["symbols"])
    torch.manual_seed(0)
    if beam:
        print(json.dumps(beam_seconds(model_name, batch, steps, setting)))
        return
    if model_name == "speechbrain":
        model: nn.Module = SpeechBrainLAS(input_size, vocabulary)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        arguments = [batch[key] for key in ("features", "feature_lengths", "targets_in", "targets_out")]

        def step() -> None:
            loss = model.loss(*arguments, batch["target_lengths"])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0)
            optimizer.step()

        work = {"step": step}
    else:
        from las.model.las import LAS

        model = LAS.build(model_config(setting), input_size, vocabulary)
        work = las_parts(model, batch)
        if not parts:
            work = {"step": work["step"]}
    model.train()
    result: dict[str, object] = {"parameters": sum(p.numel() for p in model.parameters())}
    result["seconds"] = {name: seconds(part, steps) for name, part in work.items()}
    if parts:
        result["gflop"] = {name: flops(part, model) / 1e9 for name, part in work.items()}
        result["matmul_gflops"] = matmul_rate(steps)
    print(json.dumps(result))


def model_config(settings: list[str]):  # -> las.core.config.ModelConfig, imported from the source chosen
    from las.core.config import Config

    return Config().replace(settings).model


def beam_seconds(model_name: str, batch: dict, repeats: int, settings: list[str]) -> dict[str, float]:
    """Seconds per utterance and search step: of the listener (once per utterance, shared by
    its steps), and of the whole search, listener included, with CTC 0.5 and without; on the
    batch cut to its shortest utterance (every utterance as long: the same encoder frames)."""
    features = batch["features"][:, : int(batch["feature_lengths"].min())]
    if model_name == "speechbrain":
        model = SpeechBrainLAS(features.shape[2], len(batch["symbols"])).eval()
        searches = {weight: speechbrain_beam(model, features, weight) for weight in (0.0, 0.5)}
        listener = lambda: model.encode(features)  # noqa: E731
    else:
        from las.model.las import LAS

        model = LAS.build(model_config(settings), features.shape[2], len(batch["symbols"])).eval()
        searches = {weight: las_beam(model, features, batch["symbols"], weight) for weight in (0.0, 0.5)}
        lengths = torch.full((len(features),), features.shape[1])
        listener = lambda: model.listener(features, lengths)  # noqa: E731
    steps = len(features) * BEAM_STEPS
    with torch.no_grad():
        timed = {"listener": seconds(listener, repeats) / steps}
        return timed | {
            f"search, ctc {weight}": seconds(search, repeats) / steps for weight, search in searches.items()
        }


if __name__ == "__main__":
    typer.run(main)
