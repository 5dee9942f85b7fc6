"""Benchmarks behind docs/BENCHMARKS.md. Each prints a Markdown table; variants run side by side.

    python scripts/benchmark.py blstm             # packed vs padded BLSTM, forward+backward, CPU
    python scripts/benchmark.py curve runs/an4    # training curve of a run (metrics.jsonl)
    python scripts/benchmark.py decode runs/an4/best.pt data/an4/dev.tsv   # throughput + CER

`make benchmark` runs the first; the others need a trained run (`make demo`).
"""

from __future__ import annotations

import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import typer

from las.config import Config
from las.data.features import FeatureCache, Normalizer
from las.data.manifest import read_utterances
from las.model.listener import Listener

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command()
def blstm(repeats: int = 7, batch_size: int = 16, manifest: str = "data/an4/train.tsv") -> None:
    """Listener forward+backward on real AN4 batches: packed sequences vs the padded CPU path."""
    config = Config()
    utterances = read_utterances(manifest)[: batch_size * 4]
    features = FeatureCache(config.data.cache_dir, config.features).load_all(utterances)
    normalizer = Normalizer.fit(features)
    features = sorted((normalizer(item) for item in features), key=len)  # bucketed, as in training
    batches = [features[start : start + batch_size] for start in range(0, len(features), batch_size)]
    padded_batches = [
        (torch.nn.utils.rnn.pad_sequence(batch, batch_first=True), torch.tensor([len(item) for item in batch]))
        for batch in batches
    ]
    model = config.model
    torch.manual_seed(0)
    listener = Listener(
        config.features.mel_bins, model.listener_hidden, model.pyramid_layers, model.key_dim, model.value_dim, 0.0
    )
    layers = [listener.input_layer, *listener.pyramid]

    def step(packed: bool) -> float:
        for layer in layers:
            layer.packed = packed
        started = time.perf_counter()
        for padded, lengths in padded_batches:
            output = listener(padded, lengths)
            (output.keys.sum() + output.values.sum()).backward()
        return time.perf_counter() - started

    timings: dict[str, list[float]] = {"packed": [], "padded": []}
    step(False)  # warm-up
    for _ in range(repeats):  # interleaved, so that machine noise hits both alike
        for name in timings:
            timings[name].append(step(name == "packed"))
    frames = sum(len(item) for item in features)
    packed, padded = statistics.median(timings["packed"]), statistics.median(timings["padded"])
    print(
        f"Listener forward+backward, {len(batches)} batches of {batch_size} AN4 utterances ({frames} frames), "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, median of {repeats}:\n"
    )
    print("| path | seconds | frames/s |\n| --- | --- | --- |")
    print(f"| packed (`pack_padded_sequence`) | {packed:.3f} | {frames / packed:,.0f} |")
    print(f"| padded, reversed within lengths | {padded:.3f} | {frames / padded:,.0f} |")
    print(f"\npadded is {packed / padded:.2f}x faster than packed")


@app.command()
def curve(run: Path) -> None:
    """The per-epoch table of a training run."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    print("| epoch | train loss | dev CER % | seconds | elapsed s |\n| --- | --- | --- | --- | --- |")
    for record in records:
        print(
            f"| {record['epoch']} | {record['train_loss']:.3f} | {record['dev_cer']:.2f} | "
            f"{record['seconds']:.1f} | {record['elapsed_seconds']:.0f} |"
        )
    best = min(records, key=lambda record: record["dev_cer"])
    seconds = statistics.median(record["seconds"] for record in records)
    print(
        f"\nbest dev CER {best['dev_cer']:.2f}% at epoch {best['epoch']} ({best['elapsed_seconds'] / 60:.1f} min); "
        f"median {seconds:.1f} s/epoch; peak memory {max(r['peak_memory_mb'] for r in records)} MB; "
        f"{statistics.median(r['train_frames_per_second'] for r in records):,.0f} frames/s"
    )


@app.command()
def decode(checkpoint: Path, manifest: Path, device: str = "cpu") -> None:
    """Decode throughput and accuracy through the CLI, with the peak memory of the decoding process."""
    hypotheses = Path("runs") / "benchmark-decode.csv"
    command = [
        sys.executable,
        "-m",
        "las",
        "decode",
        str(checkpoint),
        str(manifest),
        "--out",
        str(hypotheses),
        "--device",
        device,
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    report = subprocess.run(
        [sys.executable, "-m", "las", "eval", str(hypotheses), str(manifest), "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    scores = json.loads(report.stdout)
    print(result.stderr.strip().splitlines()[-1])
    print(
        f"CER {scores['cer']:.2f}%, WER {scores['wer']:.2f}%, mean distance {scores['mean_distance']:.3f}; "
        f"peak memory {peak:.0f} MB"
    )


if __name__ == "__main__":
    app()
