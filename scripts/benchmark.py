"""Benchmarks behind docs/archive/experiments.md. Each prints a Markdown table; variants run side by side.

    python scripts/benchmark.py blstm             # packed vs padded BLSTM, forward+backward, CPU
    python scripts/benchmark.py throughput        # training steps: bucketed vs unbucketed vs packed
    python scripts/benchmark.py throughput --device cuda --precisions fp32,bf16   # on a GPU
    python scripts/benchmark.py step              # the training step per part, against SpeechBrain
                                  # (and --against COMMIT), 1 thread, paired rounds; --beam: beam search
    python scripts/benchmark.py cache             # feature extraction: workers, then a warm second run
    python scripts/benchmark.py cache-open        # a warm run's cache lookups beside 0-1M entries of others
    python scripts/benchmark.py curve runs/an4    # training curve of a run (metrics.jsonl)
    python scripts/benchmark.py decode runs/an4/best.pt data/an4/dev.tsv   # CLI throughput, CER, memory
    python scripts/benchmark.py strategies runs/an4/best.pt data/an4/dev.tsv   # every strategy, and
                                  # batched beam search against the per-utterance reference
    python scripts/benchmark.py ctc-window runs/an4/best.pt   # beam + CTC on 10-60 s inputs decoded
                                  # whole: CTC prefix scores over every frame and over the window
    python scripts/benchmark.py runs runs/an4 runs/seed2   # dev CER of runs: best/averaged x decodings
    python scripts/benchmark.py eval-speed        # las eval scoring 100k utterances
    python scripts/benchmark.py busy              # an AN4 epoch, idle and beside a busy process,
                                  # threads following the load, fixed, passive or spinning
    python scripts/benchmark.py logging           # an AN4 epoch with and without TensorBoard
    python scripts/benchmark.py recipe            # an AN4 epoch of the default recipe and the previous one
    python scripts/benchmark.py alignment         # CTC forced alignments of a step in pieces: batched vs per row
    python scripts/benchmark.py augmentation --manifest runs/scale/small/train.tsv   # the augmented data
                                  # path's CPU cost per hour of audio, effect by effect

`make benchmark` runs the first; the others need a trained run (`make demo`).
"""

from __future__ import annotations

import collections
import csv
import importlib.util
import itertools
import json
import math
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
import typer
from harness import header

from las.core.config import Config, load_config
from las.core.device import resolve_device
from las.data.cache.checked_shards import FILE_NAME as CHECKED_SHARDS
from las.data.cache.store import FeatureCache
from las.data.corpora.manifest import read_utterances
from las.data.dataset import Batch, BucketBatchSampler, SpeechDataset
from las.data.front_end.features import Normalizer
from las.model.checkpoint import Checkpoint, load_checkpoint
from las.model.las import LAS
from las.model.listener import Listener
from las.recognition.evaluate import Report, score
from las.recognition.inference import transcribe
from las.recognition.recognizer import Recognizer
from las.search import Hypothesis, Strategy, build_strategy

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
RATE = 16000
DEV_MANIFEST = Path(__file__).resolve().parent.parent / "data" / "an4" / "dev.tsv"
AN4_TRAIN = Path("data/an4/train.tsv")


@app.command()
def blstm(repeats: int = 7, batch_size: int = 16, manifest: str = "data/an4/train.tsv") -> None:
    """Listener forward+backward on real AN4 batches: packed sequences vs the padded CPU path."""
    config = Config()
    utterances = read_utterances(manifest)[: batch_size * 4]
    features = FeatureCache(config.data.cache_dir, config.features).load(utterances)
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
    layers = pyramid_layers(listener)

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
    print(header("path", "seconds", "frames/s"))
    print(f"| packed (`pack_padded_sequence`) | {packed:.3f} | {frames / packed:,.0f} |")
    print(f"| padded, reversed within lengths | {padded:.3f} | {frames / padded:,.0f} |")
    print(f"\npadded is {packed / padded:.2f}x faster than packed")


@app.command()
def alignment(repeats: int = 5, rows: str = "6,21,85", frames: int = 325, characters: int = 150) -> None:
    """The CTC forced alignments of a training step in pieces (las.training.pieces): a batch's rows
    at once (`viterbi_paths`) against one row at a time, on random log-probabilities of `frames`
    encoder frames (13 s at 40 ms) spelling `characters` each; batches of AN4's model on 13 s
    recordings (6 rows of 8,500 frames) and of hw4p2.toml (21 of 32,000; 85 of 128,000)."""
    from las.model.ctc_path import viterbi_path, viterbi_paths

    generator = torch.Generator().manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, median of {repeats} paired rounds:\n")
    print(header("rows", "one at a time, ms", "the batch at once, ms", "ratio"))
    for count in [int(value) for value in rows.split(",")]:
        log_probs = torch.randn(count, frames, 30, generator=generator).log_softmax(-1)
        tokens = [torch.randint(1, 30, (characters,), generator=generator).tolist() for _ in range(count)]
        timings: dict[str, list[float]] = {"alone": [], "batch": []}
        for _ in range(repeats):  # interleaved, so that machine noise hits both alike
            for name, times in timings.items():
                started = time.perf_counter()
                if name == "batch":
                    viterbi_paths(log_probs, [frames] * count, tokens, 0)
                else:
                    [
                        viterbi_path(row_log_probs, row_tokens, 0)
                        for row_log_probs, row_tokens in zip(log_probs, tokens, strict=True)
                    ]
                times.append(time.perf_counter() - started)
        alone, batch = (1000 * statistics.median(times) for times in timings.values())
        print(f"| {count} | {alone:.0f} | {batch:.0f} | {alone / batch:.1f}x |")


# What `throughput --graphs` captures, in turn: the LSTMCell speller alone, then with the pyramid
# listener; under a Transformer speller, which spells in one pass, the listener alone.
GRAPHED = ["speller", "speller and listener"]
GRAPHED_UNDER_A_TRANSFORMER_SPELLER = ["listener"]


@app.command()
def throughput(
    utterances: int = 256,
    repeats: int = 3,
    manifest: Path = Path("data/an4/train.tsv"),
    device: str = "auto",
    precisions: str = "fp32",
    workers: int = Config().data.workers,
    graphs: bool = typer.Option(
        False,
        help="Also las's batches with train.cuda_graphs (speller alone, and with the listener; the listener "
        "alone under a Transformer speller) at each precision.",
    ),
    batch_frames: int = typer.Option(
        0, help="Also las's batches by frames (data.batch_frames) of this budget, with --graphs as graphs too."
    ),
    settings: list[str] = typer.Option([], "--set", help="Other las settings, e.g. model.speller=transformer."),
) -> None:
    """`las train`'s own training steps (`Trainer.step`: loss, clipping, update, schedule) and
    batches (`Trainer.loader`, `data.workers` processes), default settings, over the same
    utterances, interleaved: length-bucketed batches as `las train` makes them (padded BLSTMs),
    random (unbucketed) padded batches, and bucketed batches on the packed BLSTM path
    (`pack_padded_sequence`); each at every precision in `precisions` (e.g. "fp32,bf16" on a GPU). Data loading
    share = time the step waited for its batch. With `graphs`, las's batches with the speller as
    CUDA graphs too, then with the listener's pass as graphs as well (under a Transformer speller,
    the listener's alone), each after a first pass over
    them that captures every bucket (timed apart). With `batch_frames`, the same for batches by
    frames of that budget (fewer, larger batches). `--set`: another model or recipe throughout."""
    from las.training.corpus import load_corpus
    from las.training.train import Trainer

    target = resolve_device(device)
    cuda = target.type == "cuda"
    with tempfile.TemporaryDirectory() as folder:
        head = subset_manifest(manifest, utterances, Path(folder) / manifest.name)
        config = Config().replace(
            [f"data.train={head}", f"data.dev={head}", f"data.workers={workers}", f"train.out={folder}/run"]
            + [f"train.device={target.type}", "train.tensorboard=false", *settings]
        )
        corpus = load_corpus(config, None, None)
        trainers = {}
        budgets = [0, batch_frames] if batch_frames else [0]
        speller_graphed = config.model.speller == "lstm"
        graphed_parts = (GRAPHED if speller_graphed else GRAPHED_UNDER_A_TRANSFORMER_SPELLER) if graphs else []
        for precision, graphed, budget in itertools.product(precisions.split(","), ["", *graphed_parts], budgets):
            torch.manual_seed(0)  # the same initial model for every precision
            recipe = corpus.config.replace(
                [f"train.precision={precision}", f"train.cuda_graphs={bool(graphed)}", f"data.batch_frames={budget}"]
            )
            trainers[precision, graphed, budget] = trainer = Trainer(recipe, corpus, Path(folder), None)
            if graphed == GRAPHED[0]:
                trainer.optimisation.listen = None
    dataset = corpus.train
    lengths = dataset.frame_counts()
    bucketed = trainers[precisions.split(",")[0], "", 0].global_batches()
    by_frames = trainers[precisions.split(",")[0], "", batch_frames].global_batches() if batch_frames else []
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0)).tolist()
    size = len(dataset) // len(bucketed) + 1  # as many batches as the bucketed variant
    unbucketed = [order[start : start + size] for start in range(0, len(order), size)]

    def epoch(
        batches: list[list[int]], packed: bool, precision: str, graphed: str = "", budget: int = 0
    ) -> tuple[float, float]:
        """Seconds waiting for batches, and in training steps."""
        trainer = trainers[precision, graphed, budget]
        for layer in pyramid_layers(trainer.model.listener):
            layer.packed = packed
        loading = stepping = 0.0
        started = time.perf_counter()
        for indices, batch in zip(batches, trainer.loader(batches), strict=True):
            batch = batch.to(target)
            loaded = time.perf_counter()
            trainer.step(batch, indices, forcing=1.0, augment=False)
            if cuda:
                torch.cuda.synchronize()
            loading += loaded - started
            started = time.perf_counter()
            stepping += started - loaded
        return loading, stepping

    variants, captures = {}, {}  # captures: seconds of each graphed variant's first pass
    for precision in precisions.split(","):
        variants |= {
            f"bucketed, padded ({precision}, las)": (bucketed, False, precision),
            f"unbucketed, padded ({precision})": (unbucketed, False, precision),
        }
        if pyramid_layers(trainers[precision, "", 0].model.listener):  # packing is the pyramid BLSTM's
            variants[f"bucketed, packed ({precision})"] = (bucketed, True, precision)
        if batch_frames:
            variants[f"by frames, {batch_frames} ({precision}, las)"] = (by_frames, False, precision, "", batch_frames)
        for graphed, budget in itertools.product(graphed_parts, budgets):
            batching = f"by frames, {batch_frames}" if budget else "bucketed, padded"
            name = f"{batching} ({precision}, las, CUDA graphs: {graphed})"
            variants[name] = (by_frames if budget else bucketed, False, precision, graphed, budget)
            captures[name] = sum(epoch(*variants[name]))  # every bucket captured before the timed passes
    timings: dict[str, list[tuple[float, float]]] = {name: [] for name in variants}
    peaks: dict[str, int] = {}
    epoch(bucketed[:2], False, precisions.split(",")[0])  # warm-up
    for _ in range(repeats):
        for name, variant in variants.items():
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            timings[name].append(epoch(*variant))
            peaks[name] = torch.cuda.max_memory_allocated() // 2**20 if cuda else peak_rss_mb()
    frames = sum(lengths)
    where = torch.cuda.get_device_name() if cuda else f"CPU, {torch.get_num_threads()} threads"
    print(
        f"{len(dataset)} utterances of {manifest} ({frames} frames), {', '.join(settings) or 'default model'}, "
        f"las train's steps, batches of up to {config.data.batch_size}, {workers} loader workers, "
        f"torch {torch.__version__}, {where}, "
        f"median of {repeats} interleaved passes:\n"
    )
    memory = "peak GPU memory MB" if cuda else "peak RSS MB (process, cumulative)"
    print(f"| batching | padded frames | seconds | frames/s | data loading share | {memory} |")
    print("| --- | --- | --- | --- | --- | --- |")
    medians = {}
    for name, (batches, *_) in variants.items():
        padded = sum(max(lengths[i] for i in batch) * len(batch) for batch in batches)
        total = statistics.median(loading + stepping for loading, stepping in timings[name])
        share = statistics.median(loading / (loading + stepping) for loading, stepping in timings[name])
        medians[name] = total
        print(
            f"| {name} | {padded / frames - 1:.1%} extra | {total:.2f} | {frames / total:,.0f} | {share:.2%} | "
            f"{peaks[name]:,} |"
        )
    print()
    for name, seconds in captures.items():
        graphed = medians[name] / medians[name.split(", CUDA graphs")[0] + ")"]
        print(f"{name}: {1 / graphed:.2f}x the frames/s of the eager step; first pass (capturing) {seconds:.1f} s")
    for precision in precisions.split(","):
        las = medians[f"bucketed, padded ({precision}, las)"]
        packed = medians.get(f"bucketed, packed ({precision})")
        print(
            f"{precision}: las's batches give {medians[f'unbucketed, padded ({precision})'] / las:.2f}x the frames/s "
            f"of unbucketed padded ones" + (f", {packed / las:.2f}x those of bucketed packed ones" if packed else "")
        )
        for name in [name for name in medians if name.startswith("by frames") and f"({precision}, las" in name]:
            same = name.replace(f"by frames, {batch_frames}", "bucketed, padded")  # the default's batches, alike
            print(f"{name}: {medians[same] / medians[name]:.2f}x the frames/s of {same}")
    if len(precisions.split(",")) > 1:
        first, *rest = precisions.split(",")
        base = medians[f"bucketed, padded ({first}, las)"]
        for precision in rest:
            ratio = base / medians[f"bucketed, padded ({precision}, las)"]
            print(f"{precision} gives {ratio:.2f}x the frames/s of {first}")


@app.command()
def profile(
    steps: int = 20, utterances: int = 848, packed: bool = True, precision: str = "fp32", graphs: bool = False
) -> None:
    """Where a training step's time goes on a GPU (torch.profiler): kernels launched per step, the
    share of the step the GPU is busy, the kernels that take the most GPU time and the operations
    that take the most host time. AN4 train's bucketed batches, default model, after two warm-up
    steps; with `graphs` (train.cuda_graphs), after a pass over every profiled batch, so that each
    bucket's graphs are captured before the profile and only replayed in it."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiled

    from las.training.corpus import load_corpus
    from las.training.train import Trainer

    with tempfile.TemporaryDirectory() as folder:
        head = subset_manifest(Path("data/an4/train.tsv"), utterances, Path(folder) / "train.tsv")
        config = Config().replace(
            [f"data.train={head}", f"data.dev={head}", f"train.out={folder}/run", "train.device=cuda"]
            + ["train.tensorboard=false", f"train.precision={precision}", f"train.cuda_graphs={str(graphs).lower()}"]
        )
        torch.manual_seed(0)
        corpus = load_corpus(config, None, None)
        trainer = Trainer(corpus.config, corpus, Path(folder), None)
    for layer in pyramid_layers(trainer.model.listener):
        layer.packed = packed
    batches = trainer.global_batches()[: steps + 2]
    loaded = [(indices, batch.to("cuda")) for indices, batch in zip(batches, trainer.loader(batches), strict=True)]
    for indices, batch in loaded if graphs else loaded[:2]:
        trainer.step(batch, indices, forcing=1.0, augment=False)
    torch.cuda.synchronize()
    started = time.perf_counter()
    with profiled(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as profiler:
        for indices, batch in loaded[2:]:
            trainer.step(batch, indices, forcing=1.0, augment=False)
        torch.cuda.synchronize()
    wall = time.perf_counter() - started
    kernels = [event for event in profiler.events() if event.device_type == torch.autograd.DeviceType.CUDA]
    busy = sum(event.device_time for event in kernels) / 1e6
    characters = sum(int(batch.target_lengths.max()) for _, batch in loaded[2:])
    # Each wait of the host for the GPU: while it waits, it queues nothing.
    waits = sum(event.name in ("cudaStreamSynchronize", "cudaDeviceSynchronize") for event in profiler.events())
    print(
        f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {precision}, "
        f"{'packed' if packed else 'padded'} BLSTMs{', the speller and listener as CUDA graphs' if graphs else ''}, "
        f"{steps} steps of AN4 train batches (profiled)"
    )
    print(
        f"seconds per step {wall / steps:.4f}; kernels per step {len(kernels) / steps:.0f} "
        f"({len(kernels) / characters:.0f} per output character); GPU busy {busy / wall:.0%} of the wall time; "
        f"the host waited for the GPU {waits / steps:.1f} times per step"
    )
    print(profiler.key_averages().table(sort_by="device_time_total", row_limit=12))
    print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))  # what keeps the host busy
    # Where the waits come from: CUDA's sync debug mode warns at every operation that waits,
    # and a warning names the Python line that called it. SpecAugment on, as training has it.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        for indices, batch in loaded[2:4]:
            trainer.step(batch, indices, forcing=0.9, augment=True)
        torch.cuda.set_sync_debug_mode("default")
    waited = [item for item in caught if "synchroniz" in str(item.message)]
    sources = collections.Counter(f"{item.filename}:{item.lineno}" for item in waited)
    print("operations that waited for the GPU, per step (torch.cuda.set_sync_debug_mode):")
    for source, count in sources.most_common():
        print(f"  {count / 2:g}  {source}")


@app.command()
def step(
    rounds: int = 5,
    steps: int = 5,
    threads: int = 1,
    against: str = "",
    speechbrain: bool = True,
    beam: bool = False,
    seconds: float = 2.5,
    utterances: int = 16,
    manifest: Path = typer.Option(AN4_TRAIN, help="The utterances to draw the batch from."),
    variant: list[str] = typer.Option(
        [], "--variant", help="Another las model, NAME=SETTING[,SETTING...], e.g. conformer=model.listener=conformer."
    ),
) -> None:
    """The default model's training step on one batch of `utterances` utterances of `manifest` (AN4's
    by default) of about `seconds` s, on `threads` threads, each variant in a process of its own, interleaved in
    `rounds` paired rounds (scripts/step_timing.py): las with the time and FLOPs of each part of
    its step and the machine's 1024³ matmul rate; las at the commit `against` (a worktree); the
    same model from SpeechBrain's modules (needs `pip install speechbrain`). With --beam, beam 8
    search instead, with and without CTC, per utterance and step (SpeechBrain's
    S2SRNNBeamSearcher and CTCScorer); each `--variant`, las with other model settings."""
    if speechbrain and importlib.util.find_spec("speechbrain") is None:
        raise SystemExit("SpeechBrain is not installed: pip install -e '.[benchmark]' (or --no-speechbrain)")
    with tempfile.TemporaryDirectory() as folder:
        batch_file = Path(folder) / "batch.pt"
        batch = save_batch(batch_file, seconds, utterances, manifest)
        variants: dict[str, list[str]] = {"las": ["--beam"] if beam else ["--parts"]}
        if against:
            worktree = Path(folder) / "against"
            subprocess.run(
                ["git", "worktree", "add", "--detach", str(worktree), against], check=True, capture_output=True
            )
            variants[f"las {against}"] = ["--source", str(worktree)] + (["--beam"] if beam else ["--parts"])
        for item in variant:
            name, _, settings = item.partition("=")
            assignments = [part for setting in settings.split(",") for part in ("--set", setting)]
            variants[name] = assignments + (["--beam"] if beam else ["--parts"])
        if speechbrain:
            variants["SpeechBrain"] = ["--model", "speechbrain"] + (["--beam"] if beam else [])
        try:
            results = timed_in_processes(variants, [str(batch_file), "--steps", str(steps)], rounds, threads)
        finally:
            if against:
                subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], capture_output=True)
    print(
        f"{len(batch.ids)} utterances, {int(batch.feature_lengths.sum())} frames, "
        f"{int(batch.target_lengths.sum())} characters; {threads} thread(s), {rounds} rounds x {steps} "
        "repeats, medians\n"
    )
    if beam:
        beam_table(results)
    else:
        step_table(results)


@app.command()
def buckets(
    manifest: Path = Path("data/an4/train.tsv"),
    config: Path | None = typer.Option(None, help="A recipe (las train --config), for its batches and pyramid."),
    epochs: int = 3,
) -> None:
    """The shape buckets of `train.cuda_graphs` (las.model.graphed_speller) over `epochs` epochs of
    the batches `las train` composes for a TSV manifest (frames from its durations, characters
    from its transcripts; no features are read): how many graphs training captures, and the work
    the bucket padding adds to the speller's, in character steps (rows x characters) and in
    attention cells (x encoder frames), beside the batches' own padding."""
    from las.model.graphed_speller import bucket_shape

    settings = load_config(config)
    rows = list(csv.DictReader(manifest.open(), delimiter="\t"))
    frames = [settings.features.frames(float(row["duration_s"])) for row in rows]
    reduction = 2**settings.model.pyramid_layers
    encoder = [-(-count // reduction) for count in frames]  # each pyramid layer rounds up
    characters = [len(row["text"]) + 1 for row in rows]  # <sos> and the characters, or them and <eos>
    sampler = BucketBatchSampler.for_training(frames, settings.data, settings.train.seed)
    most_rows = 0 if settings.data.batch_frames else settings.data.batch_size  # as train.Trainer sets it
    work = {"own": [0, 0], "batch": [0, 0], "bucket": [0, 0]}  # character steps, attention cells
    shapes: collections.Counter[tuple[int, int, int]] = collections.Counter()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for batch in sampler.batches():
            longest = max(encoder[index] for index in batch), max(characters[index] for index in batch)
            shape = bucket_shape(len(batch), *longest, most_rows)
            shapes[shape] += 1
            for name, (steps, cells) in {
                "own": (sum(characters[i] for i in batch), sum(characters[i] * encoder[i] for i in batch)),
                "batch": (len(batch) * longest[1], len(batch) * longest[1] * longest[0]),
                "bucket": (shape[0] * shape[2], shape[0] * shape[2] * shape[1]),
            }.items():
                work[name][0] += steps
                work[name][1] += cells
    batches = sum(shapes.values())
    print(f"{manifest}: {len(rows)} utterances, {batches // epochs} batches per epoch, {epochs} epochs\n")
    common = sum(count for _, count in shapes.most_common(10)) / batches
    print(f"distinct buckets (graphs captured): {len(shapes)}; the 10 commonest hold {common:.0%} of the batches")
    print("\n" + header("padded to", "character steps", "x own", "attention cells", "x own"))
    for name, (steps, cells) in work.items():
        print(f"| {name} | {steps:,} | {steps / work['own'][0]:.2f} | {cells:,} | {cells / work['own'][1]:.2f} |")
    largest = max(shapes, key=lambda shape: shape[0] * shape[1] * shape[2])
    print(f"\nlargest bucket (rows, encoder frames, characters): {largest}")


def save_batch(path: Path, seconds: float, utterances: int, source: Path = AN4_TRAIN) -> Batch:
    """The `utterances` utterances of the manifest `source` closest to `seconds` long, as one batch
    saved to `path` with the vocabulary's symbols."""
    from las.training.corpus import load_corpus

    rows = [line.split("\t") for line in source.read_text().splitlines()[1:]]
    rows.sort(key=lambda row: abs(float(row[2]) - seconds))
    manifest = path.with_suffix(".tsv")
    lines = [f"{row[0]}\t{(source.parent / row[1]).resolve()}\t{row[2]}\t{row[3]}\n" for row in rows[:utterances]]
    manifest.write_text("id\tpath\tduration_s\ttext\n" + "".join(lines))
    config = Config().replace([f"data.train={manifest}", f"data.dev={manifest}", f"train.out={path.parent}/run"])
    corpus = load_corpus(config, None, None)
    batch = corpus.train.collate(list(range(len(corpus.train))))
    fields = ("features", "feature_lengths", "targets_in", "targets_out", "target_lengths")
    saved = {name: getattr(batch, name) for name in fields} | {"symbols": list(corpus.train.vocabulary.symbols)}
    torch.save(saved, path)
    return batch


def timed_in_processes(variants: dict[str, list[str]], options: list[str], rounds: int, threads: int) -> dict:
    """Per variant, the JSON that scripts/step_timing.py printed in each of `rounds` paired rounds."""
    script = Path(__file__).resolve().parent / "step_timing.py"
    results: dict[str, list[dict]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, own_options in variants.items():
            command = [sys.executable, str(script), *options, *own_options, "--threads", str(threads)]
            finished = subprocess.run(command, capture_output=True, text=True, env=thread_environment(threads))
            if finished.returncode:
                raise SystemExit(f"{name} failed: {finished.stderr.strip()[-2000:]}")
            results[name].append(json.loads(finished.stdout.splitlines()[-1]))
    return results


def step_table(results: dict[str, list[dict]]) -> None:
    step_seconds = {name: statistics.median(run["seconds"]["step"] for run in runs) for name, runs in results.items()}
    print("| model | parameters | seconds per step | / las |")
    print("|---|---|---|---|")
    for name, runs in results.items():
        ratio = step_seconds[name] / step_seconds["las"]
        print(f"| {name} | {runs[0]['parameters'] / 1e6:.2f}M | {step_seconds[name]:.3f} | {ratio:.2f} |")
    for name, runs in results.items():
        if "gflop" not in runs[0]:
            continue
        matmul = statistics.median(run["matmul_gflops"] for run in runs)
        print(
            f"\n| part of {name}'s step | seconds | share of step | GFLOP | GFLOP/s | of {matmul:.0f} GFLOP/s matmul |"
        )
        print("|---|---|---|---|---|---|")
        for part in runs[0]["seconds"]:
            time_taken = statistics.median(run["seconds"][part] for run in runs)
            gflop = runs[0]["gflop"][part]
            rate = gflop / time_taken
            share = time_taken / step_seconds[name]
            print(f"| {part} | {time_taken:.3f} | {share:.0%} | {gflop:.2f} | {rate:.1f} | {rate / matmul:.0%} |")


def beam_table(results: dict[str, list[dict]]) -> None:
    columns = list(results["las"][0])
    medians = {
        name: {column: statistics.median(run[column] for run in runs) for column in columns}
        for name, runs in results.items()
    }
    print("| search | " + " | ".join(f"ms per utterance-step, {column} | / las" for column in columns) + " |")
    print("|---|" + "---|---|" * len(columns))
    for name, values in medians.items():
        cells = " | ".join(
            f"{1000 * values[column]:.3f} | {values[column] / medians['las'][column]:.2f}" for column in columns
        )
        print(f"| {name} | {cells} |")


def thread_environment(threads: int) -> dict[str, str]:
    """This process's environment with every thread pool set to `threads`."""
    return os.environ | {name: str(threads) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}


@app.command()
def cache(manifest: str = "data/an4/train.tsv", workers: str = "0,2") -> None:
    """Feature extraction into an empty cache with each worker count, then a second load of the
    same data (what every later run does), the same with every entry's checksum read (as when no
    shard is known to be unchanged), and one full pass reading the memory-mapped features."""

    config = Config()
    utterances = read_utterances(manifest)
    print(f"{len(utterances)} utterances of {manifest}, torch {torch.__version__}, {torch.get_num_threads()} threads\n")
    print(header("step", "workers", "seconds", "utterances/s"))
    for count in [int(item) for item in workers.split(",")]:
        with tempfile.TemporaryDirectory() as directory:
            started = time.perf_counter()
            FeatureCache(directory, config.features, count).load(utterances)
            cold = time.perf_counter() - started
            started = time.perf_counter()
            features = FeatureCache(directory, config.features, count).load(utterances)
            warm = time.perf_counter() - started
            for memo in Path(directory).rglob(CHECKED_SHARDS):  # as before it: every entry checked
                memo.unlink()
            started = time.perf_counter()
            FeatureCache(directory, config.features, count).load(utterances)
            checked = time.perf_counter() - started
            started = time.perf_counter()
            frames = sum(len(item) for item in features)
            read = time.perf_counter() - started
        steps = {
            "extract into an empty cache": cold,
            "second run: index lookup, shards unchanged since checked": warm,
            "second run: index lookup, every entry's checksum read": checked,
            f"read all {frames:,} frames (float16 -> float32)": read,
        }
        for step, seconds in steps.items():
            print(f"| {step} | {count} | {seconds:.2f} | {len(utterances) / seconds:,.0f} |")


OPEN_CACHE = """
import resource, sys, time
started = time.perf_counter()
from las.core.config import Config, load_config
from las.data.cache.store import FeatureCache
from las.data.corpora.manifest import read_utterances
utterances = read_utterances(sys.argv[2])
read = time.perf_counter()
features = FeatureCache(sys.argv[1], Config().features).load(utterances)
assert len(features) == len(utterances)
print(time.perf_counter() - read, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


@app.command("cache-open")
def cache_open(manifest: str = "data/an4/train.tsv", others: str = "0,100000,1000000", rounds: int = 3) -> None:
    """A warm run's features from a cache that also holds `others` entries of other corpora (rows
    made up, of shards never read): seconds from the manifest read to the features, and the peak
    memory of that process, each count in its own fresh process, interleaved over `rounds`."""
    from las.data.cache.index import CacheIndex, write_rows

    counts = [int(item) for item in others.split(",")]
    results: dict[int, list[tuple[float, int]]] = {count: [] for count in counts}
    with tempfile.TemporaryDirectory() as root:
        caches = {count: Path(root) / str(count) for count in counts}
        for count, directory in caches.items():
            cache = FeatureCache(directory, Config().features)
            cache.load(read_utterances(manifest))
            with CacheIndex(cache.directory).transaction() as connection:
                for start in range(0, count, 100_000):
                    rows = [
                        [f"{index:064x}@1", f"shard-{index // 512:016x}.npy", 0, 300, 80, "0" * 32]
                        for index in range(start, min(count, start + 100_000))
                    ]
                    write_rows(
                        connection,
                        rows,
                        [
                            [index, 0, index, 0, f"{index:064x}", f"/corpus/{index}.flac"]
                            for index in range(start, min(count, start + 100_000))
                        ],
                    )
        for _ in range(rounds):
            for count, directory in caches.items():
                output = subprocess.run(
                    [sys.executable, "-c", OPEN_CACHE, str(directory), manifest],
                    capture_output=True,
                    text=True,
                    check=True,
                    env={**os.environ, "OMP_NUM_THREADS": "1"},
                ).stdout.split()
                results[count].append((float(output[0]), int(output[1])))
    print(f"{len(read_utterances(manifest))} utterances of {manifest}, {rounds} rounds, medians\n")
    print(header("other entries in the cache", "seconds to the features", "peak memory, MiB"))
    for count, measured in results.items():
        seconds = statistics.median(value for value, _ in measured)
        memory = statistics.median(value for _, value in measured)
        print(f"| {count:,} | {seconds:.2f} | {memory:.0f} |")


def pyramid_layers(listener: torch.nn.Module) -> list[torch.nn.Module]:
    """The pyramid BLSTM's layers, each with a `packed` switch; none for the self-attention listeners."""
    return [listener.input_layer, *listener.pyramid] if isinstance(listener, Listener) else []


def peak_rss_mb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


@app.command()
def curve(run: Path) -> None:
    """The per-epoch table of a training run."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    print(header("epoch", "train loss", "dev CER %", "seconds", "elapsed s"))
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


SAMPLE = ["decode.strategy=sample", "decode.samples=32", "decode.ctc_weight=0"]
STRATEGIES: dict[str, list[str]] = {
    "greedy, attention only": ["decode.strategy=greedy", "decode.ctc_weight=0"],
    "greedy, CTC 0.5": ["decode.strategy=greedy", "decode.ctc_weight=0.5"],
    "CTC greedy (listener + CTC head only)": ["decode.strategy=ctc"],
    "random search, 32 samples, T=1": [*SAMPLE, "decode.temperature=1.0"],
    "random search, 32 samples, T=0.6": [*SAMPLE, "decode.temperature=0.6"],
    "random search, 32 samples, T=0.6, CTC 0.5": [*SAMPLE, "decode.temperature=0.6", "decode.ctc_weight=0.5"],
    "random search, 32 samples, T=0.6, not normalised": [
        *SAMPLE,
        "decode.temperature=0.6",
        "decode.length_normalize=false",
    ],
    "beam 8, attention only": ["decode.strategy=beam", "decode.beam_size=8", "decode.ctc_weight=0"],
    "beam 8, attention only, not normalised": [
        "decode.strategy=beam",
        "decode.beam_size=8",
        "decode.ctc_weight=0",
        "decode.length_normalize=false",
    ],
    "beam 8, CTC 0.3": ["decode.strategy=beam", "decode.beam_size=8", "decode.ctc_weight=0.3"],
    "beam 8, CTC 0.5": ["decode.strategy=beam", "decode.beam_size=8", "decode.ctc_weight=0.5"],
    "beam 16, CTC 0.3": ["decode.strategy=beam", "decode.beam_size=16", "decode.ctc_weight=0.3"],
}


@dataclass
class Decoding:
    """A checkpoint's model and a manifest's utterances, ready to decode with any strategy."""

    loaded: Checkpoint
    model: LAS
    dataset: SpeechDataset
    references: dict[str, str]
    audio_seconds: float
    device: torch.device

    @classmethod
    def of(cls, checkpoint: Path, manifest: Path, device: str = "cpu") -> Decoding:
        recognizer = Recognizer(load_checkpoint(checkpoint), device)
        utterances, features = recognizer.utterance_features(read_utterances(manifest), manifest)
        dataset = recognizer.dataset([utterance.id for utterance in utterances], features)
        audio_seconds = sum(len(item) for item in features) * recognizer.frame_seconds()
        references = {utterance.id: utterance.text for utterance in utterances}
        return cls(recognizer.checkpoint, recognizer.model, dataset, references, audio_seconds, recognizer.device)

    def strategy(self, assignments: list[str]) -> tuple[Config, Strategy]:
        """The decoding settings `assignments` on top of the checkpoint's, and their strategy."""
        settings = self.loaded.decoding_config(assignments)
        return settings, build_strategy(settings.decode, self.loaded.vocabulary, self.model)

    def run(self, assignments: list[str]) -> tuple[list[list[Hypothesis]], float]:
        """n-best lists under the decode settings `assignments`, and the seconds they took."""
        settings, strategy = self.strategy(assignments)
        started = time.perf_counter()
        results = transcribe(
            self.model, self.dataset, strategy, settings.decode.batch_size, settings.data.max_batch_frames, self.device
        )
        return results, time.perf_counter() - started

    def score(self, results: list[list[Hypothesis]]) -> Report:
        texts = [self.loaded.vocabulary.decode(nbest[0].tokens) for nbest in results]
        hypotheses = dict(zip(self.dataset.ids, texts, strict=True))
        return score(hypotheses, self.references)


@app.command()
def strategies(checkpoint: Path, manifest: Path, device: str = "cpu", repeats: int = 3) -> None:
    """Each strategy on one checkpoint: CER, mean distance, speed; then batched beam search
    against the per-utterance reference, both over the same utterances, in one run."""
    from reference_beam import reference_beam_search

    decoding = Decoding.of(checkpoint, manifest, device)
    model, dataset, target = decoding.model, decoding.dataset, decoding.device
    audio_seconds = decoding.audio_seconds
    print(
        f"{len(dataset)} utterances ({audio_seconds:.0f} s of audio), {checkpoint}, {target}, "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, median of {repeats} runs\n"
    )
    print(header("strategy", "dev CER %", "mean distance", "WER %", "utterances/s", "real-time factor"))
    for name, assignments in STRATEGIES.items():
        timings = []
        for _ in range(repeats):
            results, seconds = decoding.run(assignments)
            timings.append(seconds)
        seconds = statistics.median(timings)
        report = decoding.score(results)
        print(
            f"| {name} | {report.cer:.2f} | {report.mean_distance:.3f} | {report.wer:.2f} | "
            f"{len(dataset) / seconds:.1f} | {seconds / audio_seconds:.4f} |"
        )

    eight_best = STRATEGIES["beam 8, CTC 0.3"] + ["decode.nbest=8"]
    _, beam = decoding.strategy(eight_best)
    batched, batched_seconds = decoding.run(eight_best)
    started = time.perf_counter()
    reference = []
    with torch.no_grad():
        for index in range(len(dataset)):
            item = dataset.collate([index]).to(target)
            reference.append(reference_beam_search(model, model.listener(item.features, item.feature_lengths), beam))
    reference_seconds = time.perf_counter() - started
    same = sum(
        [h.tokens for h in ours] == [h.tokens for h in theirs]
        and all(abs(a.score - b.score) <= 1e-4 for a, b in zip(ours, theirs, strict=True))
        for ours, theirs in zip(batched, reference, strict=True)
    )
    print(
        f"\nbeam 8 + CTC 0.3, 8-best: batched {batched_seconds:.2f} s, "
        f"per-utterance reference {reference_seconds:.2f} s: "
        f"batched is {reference_seconds / batched_seconds:.1f}x faster; identical n-best lists (scores within 1e-4) "
        f"for {same}/{len(dataset)} utterances"
    )


@app.command(name="ctc-window")
def ctc_window(
    checkpoint: Path, seconds: str = "10,30,60", nats: float = 30.0, repeats: int = 3, beam_size: int = 8
) -> None:
    """Beam search + CTC on AN4 dev utterances joined into recordings of `seconds`, each decoded
    whole (no segmentation): decoding seconds per second of audio with the CTC prefix score over
    every frame and over its window (`decode.ctc_window_nats`), interleaved; and whether the
    transcripts differ. Then the same on AN4 dev, utterance by utterance (n-best lists)."""
    from longform import dev_rows, joined

    from las.data.front_end.audio import load_audio

    settings = {"beam_size": beam_size, "ctc_weight": 0.5, "nbest": 8, "segment_seconds": 100_000}
    variants = {
        "every frame": Recognizer.load(checkpoint, "cpu", ctc_window_nats=0, **settings),
        f"window {nats:g} nats": Recognizer.load(checkpoint, "cpu", ctc_window_nats=nats, **settings),
    }
    waveforms = [load_audio(audio, RATE) for _, audio, _ in dev_rows()]
    print(
        f"{checkpoint}, beam {beam_size} + CTC 0.5, torch {torch.__version__}, {torch.get_num_threads()} threads, "
        f"median of {repeats} interleaved runs\n"
    )
    print("| recording | " + " | ".join(f"{name}: s per audio s" for name in variants) + " | speed-up | same text |")
    print("| --- | " + " | ".join("---" for _ in variants) + " | --- | --- |")
    for target in [float(item) for item in seconds.split(",")]:
        chosen, length = [], 0.0
        for waveform in waveforms:  # utterances in order until the recording is `target` long
            if length >= target:
                break
            chosen.append(waveform)
            length += len(waveform) / RATE + 0.5
        recording, _ = joined(chosen)
        audio_seconds = len(recording) / RATE
        timings: dict[str, list[float]] = {name: [] for name in variants}
        texts = {}
        for _ in range(repeats):
            for name, recognizer in variants.items():
                texts[name] = recognizer.transcribe(recording, sample_rate=RATE).text
                timings[name].append(recognizer.timing.seconds / audio_seconds)
        medians = [statistics.median(timings[name]) for name in variants]
        print(
            f"| {audio_seconds:.0f} s ({len(chosen)} utterances) | "
            + " | ".join(f"{value:.4f}" for value in medians)
            + f" | {medians[0] / medians[1]:.2f}x | {len(set(texts.values())) == 1} |"
        )
    results = {name: recognizer.transcribe(DEV_MANIFEST) for name, recognizer in variants.items()}
    same = sum(same_nbest(a.nbest, b.nbest) for a, b in zip(*results.values(), strict=True))
    print(f"\nAN4 dev, 8-best lists identical (scores within 1e-4) for {same}/{len(results['every frame'])} utterances")


def same_nbest(first: list[tuple[str, float]], second: list[tuple[str, float]]) -> bool:
    """The same texts in the same order, scores within 1e-4."""
    return [text for text, _ in first] == [text for text, _ in second] and all(
        abs(a - b) <= 1e-4 for (_, a), (_, b) in zip(first, second, strict=True)
    )


RUN_DECODINGS: dict[str, list[str]] = {  # the columns of `runs`, from the strategies above
    "greedy": STRATEGIES["greedy, attention only"],
    "beam 8": STRATEGIES["beam 8, attention only"],
    "beam 8 + CTC 0.3": STRATEGIES["beam 8, CTC 0.3"],
    "beam 8 + CTC 0.5": STRATEGIES["beam 8, CTC 0.5"],
}


@app.command()
def runs(directories: list[Path], manifest: Path = Path("data/an4/dev.tsv")) -> None:
    """Dev CER of finished runs (e.g. one recipe under several seeds): the best epoch's checkpoint
    and the average of the best epochs (`averaged.pt`), each decoded greedily, with beam search,
    and with beam search joined by the CTC prefix score; then the mean over the runs."""
    checkpoints = ["best.pt", "averaged.pt"]
    columns = [f"{name} {decoding}" for name in checkpoints for decoding in RUN_DECODINGS]
    print("| run | best epoch | " + " | ".join(columns) + " | training min |")
    print("| --- " * (len(columns) + 3) + "|")
    table = []
    for run in directories:
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        best = min(records, key=lambda record: (record["dev_cer"], -record["epoch"]))
        cers = []
        for name in checkpoints:
            decoding = Decoding.of(run / name, manifest) if (run / name).exists() else None
            for assignments in RUN_DECODINGS.values():
                cers.append(decoding.score(decoding.run(assignments)[0]).cer if decoding else float("nan"))
        table.append(cers)
        cells = " | ".join(f"{cer:.2f}" for cer in cers)
        print(f"| {run} | {best['epoch']} | {cells} | {records[-1]['elapsed_seconds'] / 60:.1f} |")
    if len(table) > 1:  # each column over the runs that have it (older runs have no averaged.pt)
        columns = [[cer for cer in column if not math.isnan(cer)] for column in zip(*table, strict=True)]
        means = " | ".join(f"{statistics.mean(column):.2f} ({len(column)})" if column else "" for column in columns)
        print(f"| mean (runs) | | {means} | |")


def subset_manifest(source: Path, count: int, target: Path) -> Path:
    """The first `count` utterances of a TSV manifest, paths made absolute so the copy reads them."""
    header, *rows = source.read_text().splitlines()
    lines = [header]
    for row in rows[:count]:
        fields = row.split("\t")
        fields[1] = str((source.parent / fields[1]).resolve())
        lines.append("\t".join(fields))
    target.write_text("\n".join(lines) + "\n")
    return target


@dataclass
class EpochTimer:
    """Seconds per epoch of the real `las train` (its metrics.jsonl) on an AN4 subset, so that a
    benchmark compares what users run, start-up and data loading included."""

    folder: Path
    utterances: int
    epochs: int
    threads: int

    def seconds(self, name: str, assignments: list[str], environment: dict[str, str]) -> list[float]:
        folder = self.folder / "manifests"
        folder.mkdir(exist_ok=True)
        # Dev: 20 of the training utterances, within the vocabulary of any subset.
        train = subset_manifest(Path("data/an4/train.tsv"), self.utterances, folder / "train.tsv")
        dev = subset_manifest(Path("data/an4/train.tsv"), 20, folder / "dev.tsv")
        out = self.folder / f"{name}-{time.monotonic_ns()}"
        settings = [f"--set={assignment}" for assignment in assignments]
        threads = ["--threads", str(self.threads)] if self.threads else []  # 0: las's own choice
        command = [sys.executable, "-m", "las", *threads, "train", "--train", str(train)]
        command += ["--dev", str(dev), "--out", str(out), "--epochs", str(self.epochs), *settings]
        finished = subprocess.run(command, env=environment, capture_output=True, text=True)
        if finished.returncode:
            raise SystemExit(f"las train failed ({name}): {finished.stderr.strip()}")
        lines = (out / "metrics.jsonl").read_text().splitlines()
        return [json.loads(line)["seconds"] for line in lines]


def epoch_table(timer: EpochTimer, variants: dict[str, tuple[list[str], dict[str, str], bool]], rounds: int) -> dict:
    """Median seconds per epoch of each variant (assignments, environment, beside a busy process),
    the variants interleaved in `rounds` paired rounds; the first epoch of each run is left out
    (feature cache and worker start-up)."""
    epochs: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (assignments, environment, busy) in variants.items():
            spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
            try:
                epochs[name] += timer.seconds(name.replace(" ", "-"), assignments, environment)[1:]
            finally:
                if spinner:
                    spinner.kill()
                    spinner.wait()
    return {name: statistics.median(values) for name, values in epochs.items()}


@app.command()
def busy(utterances: int = 200, epochs: int = 3, rounds: int = 3, spin_counts: str = "") -> None:
    """AN4 epochs of `las train` on an idle machine and beside one process that keeps a core
    busy: las as it is (threads follow the load), two fixed threads waiting passively (las's
    previous default) or spinning (libgomp's default, las before that), one thread, and two
    spinning threads with each of `spin_counts` (e.g. "3000,30000": spin that long, then sleep)."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS", "LAS_THREADS")
    }
    fixed = dict(environment, OMP_NUM_THREADS="2")
    ways = {
        "las now: threads follow the load": environment,
        "2 threads, passive (previous default)": dict(fixed, OMP_WAIT_POLICY="PASSIVE"),
        "2 threads, spinning (before that)": dict(fixed, OMP_WAIT_POLICY=""),  # invalid: libgomp's default
        "1 thread": dict(environment, OMP_NUM_THREADS="1"),
    }
    for count in filter(None, spin_counts.split(",")):
        ways[f"2 threads, spin {count}"] = dict(fixed, OMP_WAIT_POLICY="", GOMP_SPINCOUNT=count)
    loads = ("idle", "busy")
    variants = {f"{load}, {way}": ([], env, load == "busy") for load in loads for way, env in ways.items()}
    medians = timed_epochs(variants, utterances, epochs, rounds, threads=0)
    print("\n" + header("threads and wait", "idle s/epoch", "busy s/epoch", "busy / idle"))
    for way in ways:
        idle, loaded = medians[f"idle, {way}"], medians[f"busy, {way}"]
        print(f"| {way} | {idle:.2f} | {loaded:.2f} | {loaded / idle:.2f} |")


@app.command()
def logging(utterances: int = 200, epochs: int = 3, rounds: int = 3, threads: int = 2) -> None:
    """AN4 epochs of `las train` with TensorBoard (its default: scalars every 50 steps, the
    attention images, transcripts and hparams every epoch) and without."""
    variants = {
        "tensorboard": (["train.tensorboard=true"], dict(os.environ), False),
        "no tensorboard": (["train.tensorboard=false"], dict(os.environ), False),
    }
    medians = timed_epochs(variants, utterances, epochs, rounds, threads)
    print(f"\nTensorBoard costs {medians['tensorboard'] / medians['no tensorboard'] - 1:+.1%} of an epoch")


@app.command()
def recipe(utterances: int = 848, epochs: int = 3, rounds: int = 2, threads: int = 2) -> None:
    """AN4 epochs of the default recipe (speed perturbation, waveform augmentation from the first
    epoch, per-utterance normalisation) against the previous default without them."""
    previous = [
        "train.speed_perturbation=0",
        "train.augment.noise=0",
        "train.augment.telephone=0",
        "train.augment.reverberation=0",
        "train.augment.gain_db=0",
        "features.utterance_mean=false",
    ]
    variants = {
        "default (augmented)": (["train.augment.start_epoch=0"], dict(os.environ), False),
        "previous default": (previous, dict(os.environ), False),
    }
    medians = timed_epochs(variants, utterances, epochs, rounds, threads)
    print(f"\nthe default's epoch takes {medians['default (augmented)'] / medians['previous default']:.2f}x as long")


def timed_epochs(variants: dict, utterances: int, epochs: int, rounds: int, threads: int) -> dict[str, float]:
    """Median seconds per epoch of each variant (see `epoch_table`), printed as a table."""
    with tempfile.TemporaryDirectory() as folder:
        medians = epoch_table(EpochTimer(Path(folder), utterances, epochs, threads), variants, rounds)
    threads_used = threads or "las's default"
    print(f"{utterances} AN4 utterances, threads: {threads_used}, median s/epoch over {rounds} paired rounds:\n")
    print(header("variant", "s/epoch"))
    for name, seconds in medians.items():
        print(f"| {name} | {seconds:.2f} |")
    return medians


@app.command(name="eval-speed")
def eval_speed(utterances: int = 100_000, manifest: str = "data/an4/train.tsv") -> None:
    """Score `utterances` hypothesis/reference pairs made from AN4 transcripts with random edits."""

    texts = [u.text for u in read_utterances(manifest)]
    generator = random.Random(0)
    references, hypotheses = {}, {}
    for index in range(utterances):
        reference = texts[index % len(texts)]
        characters = list(reference)
        for _ in range(generator.randint(0, 4)):
            position = generator.randrange(len(characters))
            characters[position] = generator.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ ")
        references[f"utt{index}"], hypotheses[f"utt{index}"] = reference, "".join(characters)
    started = time.perf_counter()
    report = score(hypotheses, references)
    seconds = time.perf_counter() - started
    print(f"scored {report.utterances} utterances in {seconds:.2f} s (CER {report.cer:.2f}%)")


@app.command()
def augmentation(manifest: Path = Path("data/an4/train.tsv"), utterances: int = 200, rounds: int = 3) -> None:
    """The training data path's CPU cost per hour of audio, on one thread (one loader worker):
    reading an utterance and its log-mel features, each waveform effect alone, and the
    augmentation as the default recipe draws it (`WaveformAugmentation.features`, every utterance
    given its own seed). Median of `rounds` rounds, the variants interleaved."""
    from las.data.augmentation.augmenter import Source, WaveformAugmentation
    from las.data.augmentation.channel_effects import (
        add_noise,
        babble,
        pink_noise,
        reverberate,
        room_response,
        telephone,
        white_noise,
    )
    from las.data.front_end.audio import load_audio
    from las.data.front_end.features import FilterbankExtractor, change_speed, log_mel_features

    torch.set_num_threads(1)
    config = Config()
    rows = read_utterances(manifest)
    sources = [Source(str(row.audio)) for row in list(rows)[:utterances]]
    waveforms = [load_audio(Path(source.audio), RATE) for source in sources]
    hours = sum(len(waveform) for waveform in waveforms) / RATE / 3600
    extractor = FilterbankExtractor(config.features)
    augmentation = WaveformAugmentation.of(config.train.augment, config.features, sources, 0)
    pool = augmentation.pool

    effects = {
        "read the audio": lambda index, waveform, generator: load_audio(Path(sources[index].audio), RATE),
        "log-mel features": lambda index, waveform, generator: log_mel_features(extractor, waveform, "-"),
        "speed 0.9": lambda index, waveform, generator: change_speed(waveform, 0.9, RATE),
        "room, RT60 0.5 s": lambda index, waveform, generator: reverberate(
            waveform, room_response(RATE, 0.5, generator)
        ),
        "white noise": lambda index, waveform, generator: add_noise(
            waveform, white_noise(len(waveform), generator), 10
        ),
        "pink noise": lambda index, waveform, generator: add_noise(waveform, pink_noise(len(waveform), generator), 10),
        "babble of 5": lambda index, waveform, generator: add_noise(
            waveform, babble(pool, len(waveform), 5, generator), 10
        ),
        "telephone": lambda index, waveform, generator: telephone(waveform, RATE, 300, 3400),
        "as drawn (read, effects, features; the default's probabilities)": lambda index, waveform, generator: (
            augmentation.features(sources[index], 1.0, generator)
        ),
    }
    seconds: dict[str, list[float]] = collections.defaultdict(list)
    for _ in range(rounds):
        for name, effect in effects.items():
            generator = torch.Generator().manual_seed(0)
            started = time.perf_counter()
            for index, waveform in enumerate(waveforms):
                effect(index, waveform, generator)
            seconds[name].append(time.perf_counter() - started)
    print(
        f"{len(waveforms)} utterances of {manifest} ({hours * 3600 / len(waveforms):.1f} s on average), one thread, "
        f"median of {rounds} rounds:\n"
    )
    print(header("on one thread", "CPU seconds per hour of audio", "x real time"))
    for name, measured in seconds.items():
        median = statistics.median(measured)
        print(f"| {name} | {median / hours:.1f} | {hours * 3600 / median:,.0f} |")


@app.command()
def draws(manifest: Path = Path("data/an4/train.tsv"), utterances: int = 848, rounds: int = 3) -> None:
    """A training epoch's draws as `las train`'s loader workers make them (`SpeechDataset`: the
    epoch's speed of each utterance, what surrounds its speech, and from
    `train.augment.start_epoch` on its waveform effects; the default recipe), on one thread: the
    first epoch, which finds where each utterance's speech is (`SharedEdges`), and a later one,
    which reads it. Before that cache, every epoch was a first one. Median of `rounds` rounds,
    the variants interleaved on the same draws."""
    from las.data.dataset import Draw
    from las.training.corpus import load_corpus

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        head = subset_manifest(manifest, utterances, Path(folder) / manifest.name)
        config = Config().replace([f"data.train={head}", f"data.dev={head}", f"train.out={folder}/run"])
        dataset = load_corpus(config, None, None).train
    assert dataset.edges is not None, "the default recipe trims what surrounds the speech"
    variants = dataset.variants(config.train.augment.start_epoch, config.train.seed)
    seconds: dict[str, list[float]] = collections.defaultdict(list)
    for round_, augmented in itertools.product(range(rounds), (False, True)):
        dataset.edges.values.fill_(-1)
        for epoch in ("first epoch (edges found)", "later epoch (edges read)"):
            started = time.perf_counter()
            for index, variant in enumerate(variants):
                dataset[Draw(index, variant, round_ * 1_000_003 + index if augmented else None)]
            name = f"{'augmented' if augmented else 'before the augmentation starts'}, {epoch}"
            seconds[name].append(time.perf_counter() - started)
    hours = sum(dataset.frame_counts()) / config.features.frames(3600)
    print(f"{len(dataset)} utterances of {manifest}, one thread, median of {rounds} rounds:\n")
    print(header("an epoch's draws, one thread", "seconds", "ms per draw", "CPU seconds per hour of audio"))
    for name, measured in seconds.items():
        median = statistics.median(measured)
        print(f"| {name} | {median:.2f} | {1000 * median / len(dataset):.1f} | {median / hours:.1f} |")


if __name__ == "__main__":
    app()
