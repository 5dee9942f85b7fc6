"""`las train`: the training loop, dev evaluation, schedules, and checkpoints that resume exactly."""

from __future__ import annotations

import json
import math
import resource
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from las.checkpoint import load_checkpoint, save_checkpoint
from las.config import Config
from las.data.augment import spec_augment
from las.data.dataset import BucketBatchSampler, SpeechDataset
from las.data.features import FeatureCache, Normalizer
from las.data.manifest import Utterance, check_characters, read_utterances
from las.device import resolve_device
from las.errors import LasError
from las.inference import transcribe
from las.losses import joint_loss
from las.metrics import character_error_rate
from las.model.las import LAS
from las.plots import plot_attention
from las.search import GreedySearch, Symbols
from las.text import Vocabulary


def learning_rate_scale(step: int, warmup_steps: int, total_steps: int, final_scale: float) -> float:
    """Linear warm-up, then cosine decay to `final_scale` at `total_steps`."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return final_scale + (1 - final_scale) * 0.5 * (1 + math.cos(math.pi * progress))


def teacher_forcing_rate(epoch: int, final_rate: float, decay_epochs: int) -> float:
    """Probability of feeding the true previous character: 1 at first, falling to `final_rate`."""
    return 1.0 - (1.0 - final_rate) * min(1.0, epoch / max(1, decay_epochs))


@dataclass
class Progress:
    """Where training stands; saved in every checkpoint so that `--resume` continues exactly."""

    epoch: int = 0  # epochs completed
    batch_in_epoch: int = 0  # batches of epoch `epoch + 1` already trained on (non-zero after Ctrl-C)
    step: int = 0  # optimizer steps
    best_cer: float = math.inf
    bad_batches: int = 0
    loss_sum: float = 0.0  # over the batches of the current epoch so far
    loss_batches: int = 0
    frames: int = 0
    seconds: float = 0.0  # spent on the current epoch so far
    elapsed: float = 0.0  # spent on completed epochs
    rng: dict[str, Any] = field(default_factory=dict)


@dataclass
class Corpus:
    train: SpeechDataset
    dev: SpeechDataset
    normalizer: Normalizer


def load_corpus(config: Config, vocabulary: Vocabulary | None, normalizer: Normalizer | None) -> Corpus:
    """Read both manifests, fetch features (cached), fit the normaliser and vocabulary if new."""
    train_utterances = read_utterances(config.data.train)
    dev_utterances = read_utterances(config.data.dev)
    vocabulary = vocabulary or Vocabulary.from_texts(utterance.text for utterance in train_utterances)
    check_characters(train_utterances, vocabulary, config.data.train)
    check_characters(dev_utterances, vocabulary, config.data.dev)
    cache = FeatureCache(config.data.cache_dir, config.features)
    train_features = cache.load_all(train_utterances, "train features")
    dev_features = cache.load_all(dev_utterances, "dev features")
    normalizer = normalizer or Normalizer.fit(train_features)

    def dataset(utterances: list[Utterance], features: list[torch.Tensor], with_targets: bool) -> SpeechDataset:
        return SpeechDataset(
            [utterance.id for utterance in utterances],
            [normalizer(item) for item in features],
            [utterance.text for utterance in utterances],
            vocabulary,
            with_targets,
        )

    return Corpus(
        dataset(train_utterances, train_features, True), dataset(dev_utterances, dev_features, False), normalizer
    )


def train(config: Config, resume: bool = False, assignments: list[str] | None = None) -> Path:
    """Train into `config.train.out`; with `resume`, continue the run saved there (with `assignments` on top)."""
    out = Path(config.train.out)
    last = out / "last.pt"
    checkpoint = None
    if resume:
        if not last.exists():
            raise LasError(f"--resume: no checkpoint to resume from at {last}")
        checkpoint = load_checkpoint(last)
        config = checkpoint.config.replace(assignments or [])
    device = resolve_device(config.train.device)
    torch.manual_seed(config.train.seed)
    corpus = load_corpus(
        config,
        checkpoint.vocabulary if checkpoint else None,
        checkpoint.normalizer if checkpoint else None,
    )
    vocabulary = corpus.train.vocabulary
    model = LAS.build(config.model, config.features.mel_bins, len(vocabulary)).to(device)
    optimizer = torch.optim.Adam(
        model.parameters(), lr=config.train.learning_rate, weight_decay=config.train.weight_decay
    )
    sampler = BucketBatchSampler(
        corpus.train.frame_counts(), config.data.batch_size, config.data.max_batch_frames, seed=config.train.seed
    )
    total_steps = config.train.epochs * len(sampler)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda step: learning_rate_scale(
            step, config.train.warmup_steps, total_steps, config.train.final_learning_rate_scale
        ),
    )
    progress = Progress()
    if checkpoint:
        try:
            model.load_state_dict(checkpoint.model_state)
        except RuntimeError:
            raise LasError(
                f"{last}: model settings differ from the checkpoint's; resume with the same model.*"
            ) from None
        optimizer.load_state_dict(checkpoint.training_state["optimizer"])
        scheduler.load_state_dict(checkpoint.training_state["scheduler"])
        progress = Progress(**checkpoint.training_state["progress"])
        restore_rng(progress.rng)
    elif last.exists():
        raise LasError(f"{out} already holds a run; continue it with --resume or choose another --out")
    out.mkdir(parents=True, exist_ok=True)
    keep_metrics_until(out / "metrics.jsonl", progress.epoch)
    (out / "config.json").write_text(json.dumps(config.to_dict(), indent=2) + "\n")

    def save(path: Path) -> None:
        progress.rng = capture_rng()
        state = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "progress": vars(progress)}
        save_checkpoint(path, config, vocabulary, corpus.normalizer, model, state)

    search = GreedySearch(Symbols.of(vocabulary), config.decode.max_length_ratio)
    parameters = sum(parameter.numel() for parameter in model.parameters())
    tqdm.write(
        f"training {parameters / 1e6:.2f}M parameters on {device}: "
        f"{len(corpus.train)} train, {len(corpus.dev)} dev utterances"
    )
    try:
        while progress.epoch < config.train.epochs:
            train_epoch(model, corpus.train, sampler, optimizer, scheduler, config, progress, device)
            started = time.perf_counter()
            dev_cer = evaluate_dev(
                model, corpus.dev, search, config, device, out / "attention" / f"epoch_{progress.epoch + 1:03d}.png"
            )
            progress.seconds += time.perf_counter() - started
            record = {
                "epoch": progress.epoch + 1,
                "step": progress.step,
                "train_loss": progress.loss_sum / max(1, progress.loss_batches),
                "dev_cer": dev_cer,
                "seconds": round(progress.seconds, 2),
                "elapsed_seconds": round(progress.elapsed + progress.seconds, 2),
                "learning_rate": scheduler.get_last_lr()[0],
                "teacher_forcing": teacher_forcing_rate(
                    progress.epoch, config.train.teacher_forcing_final, config.train.teacher_forcing_decay_epochs
                ),
                "train_frames_per_second": round(progress.frames / max(progress.seconds, 1e-9)),
                "bad_batches": progress.bad_batches,
                "peak_memory_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            }
            progress = Progress(
                epoch=progress.epoch + 1,
                step=progress.step,
                best_cer=min(progress.best_cer, dev_cer),
                bad_batches=progress.bad_batches,
                elapsed=record["elapsed_seconds"],
            )
            with open(out / "metrics.jsonl", "a") as file:
                file.write(json.dumps(record) + "\n")
            save(last)
            if dev_cer <= progress.best_cer:
                shutil.copyfile(last, out / ".best.pt.tmp")
                (out / ".best.pt.tmp").replace(out / "best.pt")
            tqdm.write(
                f"epoch {record['epoch']:3d}  loss {record['train_loss']:.3f}  dev CER {dev_cer:6.2f}%  "
                f"best {progress.best_cer:6.2f}%  {record['seconds']:.0f}s"
            )
    except KeyboardInterrupt:
        save(last)
        raise LasError(
            f"interrupted: saved {last} at epoch {progress.epoch + 1}, batch {progress.batch_in_epoch}; "
            "continue with --resume"
        ) from None
    return out


def train_epoch(
    model: LAS,
    dataset: SpeechDataset,
    sampler: BucketBatchSampler,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    config: Config,
    progress: Progress,
    device: torch.device,
) -> None:
    """One pass over the training batches of epoch `progress.epoch + 1`, from `progress.batch_in_epoch` on."""
    settings = config.train
    model.train()
    sampler.set_epoch(progress.epoch)
    batches = sampler.batches()
    forcing = teacher_forcing_rate(
        progress.epoch, settings.teacher_forcing_final, settings.teacher_forcing_decay_epochs
    )
    augment = progress.epoch >= settings.specaugment_start_epoch
    bar = tqdm(batches[progress.batch_in_epoch :], desc=f"epoch {progress.epoch + 1}", unit="batch", leave=False)
    started = time.perf_counter()
    for indices in bar:
        batch = dataset.collate(indices).to(device)
        features = batch.features
        if augment:
            features = spec_augment(
                features,
                batch.feature_lengths,
                settings.frequency_masks,
                settings.frequency_mask_width,
                settings.time_masks,
                settings.time_mask_width,
            )
        output = model(features, batch.feature_lengths, batch.targets_in, forcing)
        loss, parts = joint_loss(
            output,
            batch.targets_in,
            batch.targets_out,
            batch.target_lengths,
            config.model.ctc_weight,
            settings.label_smoothing,
        )
        optimizer.zero_grad(set_to_none=True)
        if not torch.isfinite(loss):
            progress.batch_in_epoch += 1
            progress.bad_batches += 1
            if progress.bad_batches > settings.max_bad_batches:
                raise LasError(
                    f"training diverged: {progress.bad_batches} batches with a non-finite loss "
                    "(lower train.learning_rate?)"
                )
            continue
        loss.backward()
        clip_gradients(model, settings.gradient_clip)
        optimizer.step()
        scheduler.step()
        progress.batch_in_epoch += 1
        progress.step += 1
        progress.loss_sum += loss.item()
        progress.loss_batches += 1
        progress.frames += int(batch.feature_lengths.sum())
        bar.set_postfix(loss=f"{progress.loss_sum / progress.loss_batches:.3f}")
    progress.seconds += time.perf_counter() - started


def clip_gradients(model: LAS, limit: float) -> None:
    torch.nn.utils.clip_grad_norm_(model.parameters(), limit)


def evaluate_dev(
    model: LAS, dataset: SpeechDataset, search: GreedySearch, config: Config, device: torch.device, plot_path: Path
) -> float:
    """Greedy dev CER (no teacher forcing), and the attention map of the first dev utterance."""
    results = transcribe(model, dataset, search, config.decode.batch_size, config.data.max_batch_frames, device, "dev")
    best = [hypotheses[0] for hypotheses in results]
    vocabulary = dataset.vocabulary
    hypotheses = [vocabulary.decode(hypothesis.tokens) for hypothesis in best]
    first = best[0]
    labels = [vocabulary.symbols[index] for index in first.tokens] + ["<eos>"]
    plot_attention(first.attention, labels, plot_path, f"{dataset.ids[0]}: {hypotheses[0]!r}")
    return character_error_rate(hypotheses, dataset.texts)


def capture_rng() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    if "torch" in state:
        torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def keep_metrics_until(path: Path, epochs: int) -> None:
    """Drop metric lines of epochs after the checkpoint (a run killed between log and save)."""
    if not path.exists():
        return
    lines = [line for line in path.read_text().splitlines() if line and json.loads(line)["epoch"] <= epochs]
    path.write_text("".join(line + "\n" for line in lines))
