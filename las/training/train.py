"""`las train`: the training loop, its schedules, and checkpoints that resume exactly."""

from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from las.core.config import Config
from las.core.errors import LasError
from las.core.files import locked_directory, make_directory, write_text_atomically
from las.core.progress import progress_bar, say
from las.core.stopping import StopRequests
from las.core.threads import follow_load
from las.data.augmentation.word_excerpts import missing_word_times
from las.data.dataset import Batch, BucketBatchSampler
from las.data.loading import training_loader
from las.export.runtime import load_model
from las.model.checkpoint import Checkpoint, save_checkpoint
from las.model.las import LAS
from las.model.pretrained import load_speller
from las.search import GreedySearch, Rules, Symbols
from las.training.attention_start import AttentionStart
from las.training.averaging import average_states, keep_snapshot, load_snapshots, snapshot_path
from las.training.batch_memory import sized_batches
from las.training.corpus import Corpus, load_corpus
from las.training.dev_evaluation import evaluate_dev
from las.training.distributed import Distributed
from las.training.initialisation import initialise
from las.training.metrics_file import append_line, epoch_line, epoch_record, keep_metrics_until
from las.training.monitor import EXAMPLES, Monitor, StepValues, wandb_module
from las.training.optimisation import Optimisation
from las.training.random_states import capture_rng, restore_rng
from las.training.run_progress import Progress


def teacher_forcing_rate(epoch: int, final_rate: float, decay_epochs: int) -> float:
    """Probability of feeding the true previous character: 1 at first, falling to `final_rate`."""
    return 1.0 - (1.0 - final_rate) * min(1.0, epoch / max(1, decay_epochs))


def train(config: Config, resume: bool = False, assignments: list[str] | None = None) -> Path:
    """Train into `config.train.out`; with `resume`, continue the run saved there (`assignments` on top
    of its saved config). Returns the run directory, which this process holds locked meanwhile."""
    out = make_directory(config.train.out, "--out")
    distributed = Distributed.from_environment()
    with locked_directory(out) if distributed.is_main else contextlib.nullcontext():
        checkpoint = None
        if resume:
            if not (out / "last.pt").exists():
                raise LasError(f"--resume: no checkpoint to resume from at {out / 'last.pt'}")
            checkpoint = load_model(out / "last.pt")
            config = checkpoint.config.replace(assignments or [])
        elif (out / "last.pt").exists():
            raise LasError(f"{out} already holds a run; continue it with --resume or choose another --out")
        if config.train.wandb_project:
            wandb_module(config.train.wandb_project)  # before any work
        torch.manual_seed(config.train.seed)
        # Fine-tuning keeps the trained model's normalisation: its listener learnt on features
        # scaled by it, and a few minutes of new speech would estimate it worse.
        start = checkpoint or (load_model(config.train.init) if config.train.init else None)
        if start is not None and start.export is not None:
            raise LasError(f"--init {config.train.init}: an export holds no trainable weights; give its checkpoint")
        corpus = load_corpus(
            config,
            start.vocabulary if start else None,
            start.normalizer if start else None,
            extend_vocabulary=checkpoint is None,
        )
        initial = start if checkpoint is None else None
        try:
            Trainer(corpus.config, corpus, out, checkpoint, distributed, initial).run()
            distributed.wait_for_all()
        finally:
            distributed.stop()
    return out


@dataclass(frozen=True)
class Step:
    """What one training step did, summed over ranks."""

    loss: float
    parts: dict[str, float]  # the attention and CTC losses
    frames: int
    gradient_norm: float  # before clipping; not finite: the step was skipped
    learning_rate: float
    stop: bool  # a rank was asked to stop
    save: bool  # last.pt is due

    @property
    def updated(self) -> bool:
        return math.isfinite(self.gradient_norm)


class Trainer:
    """One run: the model and its steps (`las.training.optimisation`), the data, the epochs, checkpoints
    and reports, and where training stands.

    Under `torchrun` there is one Trainer per rank: all hold the same model and batch list, each
    trains on its shard of every global batch and decodes its shard of dev; rank 0 writes.
    """

    def __init__(
        self,
        config: Config,
        corpus: Corpus,
        out: Path,
        checkpoint: Checkpoint | None,
        distributed: Distributed = Distributed(),
        initial: Checkpoint | None = None,
    ) -> None:
        """From `checkpoint` to resume, or a new run, starting from `initial`'s weights (train.init)."""
        self.config = config
        self.corpus = corpus
        self.out = out
        self.distributed = distributed
        self.device = distributed.start(config.train.device)
        self.vocabulary = corpus.train.vocabulary
        input_size = corpus.train.features[0].shape[1]  # 80 log-mels, or the precomputed features' dimension
        self.model = LAS.build(config.model, input_size, len(self.vocabulary)).to(self.device)
        if checkpoint is None:  # a resumed run keeps the batches it began with
            config = self.config = sized_batches(config, self.model, corpus.train, self.device, distributed)
        settings = config.train
        self.sampler = BucketBatchSampler.for_training(corpus.train.frame_counts(), config.data, settings.seed)
        total_steps = settings.epochs * len(self.global_batches())
        self.attention_start = AttentionStart(config, corpus.train.frame_counts(), " " in self.vocabulary.index)
        learning_rate = self.attention_start.learning_rate
        self.optimisation = Optimisation(config, self.model, self.device, distributed, total_steps, learning_rate)
        # With the LSTM speller's training pass as graphs, its dev pass's steps are graphs too.
        self.search = GreedySearch(
            Symbols.of(self.vocabulary),
            Rules.of(config.decode),
            cuda_graphs=settings.cuda_graphs and config.model.speller == "lstm",
        )
        self.monitor = Monitor(config, out, total_steps, enabled=distributed.is_main)
        self.progress = Progress()
        self.stop_requests = StopRequests()
        self.saved_at = time.monotonic()  # of the last save of last.pt
        restored = False
        if checkpoint:
            restored = self.restore(checkpoint)
        elif settings.speller_init:
            load_speller(self.model.speller, settings.speller_init, self.vocabulary)
        elif initial:
            parts = (self.model, config.model, self.vocabulary, initial, settings.init, settings.frozen_parts)
            for line in initialise(*parts):
                if distributed.is_main:
                    say(f"--init {settings.init}: {line}")
        if distributed.enabled and not restored:  # ranks share the model, not their dropout or masks
            torch.manual_seed(settings.seed + 1_000_003 * distributed.rank + self.progress.step)

    def restore(self, checkpoint: Checkpoint) -> bool:
        """The training state of `checkpoint`; whether this rank's random state was in it (not
        when it was saved by another number of processes)."""
        try:
            self.model.load_state_dict(checkpoint.model_state)
        except RuntimeError:
            raise LasError(
                f"{self.out / 'last.pt'}: model settings differ from the checkpoint's; resume with the same model.*"
            ) from None
        try:
            self.optimisation.load_state_dict(checkpoint.training_state)
            self.progress = Progress.saved(checkpoint.training_state["progress"])
            return restore_rng(self.progress.rng, self.distributed)
        except (KeyError, TypeError, ValueError, RuntimeError) as error:
            raise LasError(
                f"{self.out / 'last.pt'}: its training state is missing or damaged ({type(error).__name__}); "
                "it can be decoded, not resumed"
            ) from None

    def save(self, path: Path) -> None:
        """The whole training state, taken at a batch boundary, so that it resumes exactly; every
        rank calls it at the same point, and rank 0 writes every rank's random state with it."""
        ranks = [state for (state,) in self.distributed.gather([capture_rng()])]
        if not self.distributed.is_main:
            return
        self.saved_at = time.monotonic()
        self.progress.rng = {"ranks": ranks}
        state = {**self.optimisation.state_dict(), "progress": vars(self.progress)}
        save_checkpoint(path, self.config, self.vocabulary, self.corpus.normalizer, self.model, state)

    def global_batches(self) -> list[list[int]]:
        """This epoch's batches; under torchrun, those with an utterance for every rank."""
        return [batch for batch in self.sampler.batches() if len(batch) >= self.distributed.world_size]

    def run(self) -> None:
        if self.distributed.is_main:
            keep_metrics_until(self.out / "metrics.jsonl", self.progress.epoch)
            write_text_atomically(self.out / "config.json", json.dumps(self.config.to_dict(), indent=2) + "\n")
            parameters = sum(parameter.numel() for parameter in self.model.parameters())
            processes = f" x {self.distributed.world_size} processes" if self.distributed.enabled else ""
            tqdm.write(
                f"training {parameters / 1e6:.2f}M parameters on {self.device}{processes}: "
                f"{len(self.corpus.train)} train, {len(self.corpus.dev)} dev utterances"
            )
            progress = self.progress
            if self.attention_start.active(progress.piece_frames):
                for line in self.attention_start.describe():
                    tqdm.write(line)
            if missing := missing_word_times(self.config):
                tqdm.write(missing)
        with self.stop_requests:
            try:
                while self.progress.epoch < self.config.train.epochs:
                    if self.train_epoch():
                        self.save_and_stop()
                    self.finish_epoch()
                    if self.any_rank_asks(self.stop_requests.requested):
                        self.save_and_stop()  # last.pt is this epoch's end already: saved again, the same
            except KeyboardInterrupt:
                raise LasError(
                    f"interrupted twice: stopped at once without saving; --resume continues from {self.out / 'last.pt'}"
                ) from None
            finally:
                self.monitor.close(self.progress.best_cer)  # a stopped run's curves so far stay readable
        if self.distributed.is_main:
            self.write_average()

    def any_rank_asks(self, request: bool) -> bool:
        """Whether any rank asks for something: every rank acts on the same answer at the same point."""
        return self.distributed.sum([float(request)])[0] > 0

    def save_and_stop(self) -> None:
        """Save `last.pt` where training stands (a batch boundary) and end the run on a stop request."""
        self.save(self.out / "last.pt")
        received = self.stop_requests.received
        raise LasError(
            f"stopped by {received.name if received else 'another process'}: saved {self.out / 'last.pt'} at epoch "
            f"{self.progress.epoch + 1}, batch {self.progress.batch_in_epoch}; continue with --resume"
        )

    def teacher_forcing(self) -> float:
        """The rate of feeding the true previous character in the epoch where training stands."""
        settings = self.config.train
        return teacher_forcing_rate(
            self.progress.epoch, settings.teacher_forcing_final, settings.teacher_forcing_decay_epochs
        )

    def checkpoint_due(self) -> bool:
        minutes = self.config.train.checkpoint_minutes
        return minutes > 0 and time.monotonic() - self.saved_at >= 60 * minutes

    def train_epoch(self) -> bool:
        """The training batches of epoch `progress.epoch + 1`, from `progress.batch_in_epoch` on;
        True when it stopped early on a stop request (after a whole batch)."""
        settings, progress, distributed = self.config.train, self.progress, self.distributed
        self.optimisation.network.train()
        self.sampler.set_epoch(progress.epoch)
        batches = self.global_batches()[progress.batch_in_epoch :]
        epoch_batches = progress.batch_in_epoch + len(batches)
        forcing = self.teacher_forcing()
        augment = progress.epoch >= settings.specaugment_start_epoch
        bar = progress_bar(batches, f"epoch {progress.epoch + 1}", "batch", enabled=distributed.is_main)
        loader = iter(self.loader(batches))
        started = time.perf_counter()
        try:
            for indices in bar:
                follow_load()
                step = self.step(next(loader).to(self.device), indices, forcing, augment)
                if step.updated:
                    if progress.alignment_start is None and step.parts.get("cut", 0):
                        progress.alignment_start = progress.step
                    if step.parts.get("cut", 0):
                        self.attention_start.follow(progress, step.parts["diagonal_share"])
                    progress.record(step.loss, step.parts, step.frames)
                    bar.set_postfix(loss=f"{progress.loss_sum / max(1, progress.loss_batches):.3f}")
                    self.monitor.step(
                        StepValues(
                            progress.step, progress.epoch + 1, progress.batch_in_epoch, epoch_batches, step.loss,
                            step.parts, step.learning_rate, forcing, step.gradient_norm, step.frames,
                        )
                    )  # fmt: skip
                elif self.optimisation.scaler.is_enabled() and math.isfinite(step.loss):
                    progress.batch_in_epoch += 1  # fp16 gradients overflowed: a smaller scale, this batch lost
                else:
                    progress.skip_bad_batch(settings.max_bad_batches)
                if step.stop:
                    return True
                if step.save:  # every rank: each gives its random state
                    self.save(self.out / "last.pt")
        finally:
            progress.train_seconds += time.perf_counter() - started
            # Its workers down now, not when the iterator is collected: an error's traceback holds
            # the iterator (its own frames are in it) until exit, where joining workers that block
            # SIGTERM as the main thread does (las.core.stopping) would never return.
            if hasattr(loader, "_shutdown_workers"):
                loader._shutdown_workers()
        return False

    def step(self, batch: Batch, indices: list[int], forcing: float, augment: bool) -> Step:
        """One optimisation step on the global batch `indices`, of which this rank holds `batch`:
        the loss, gradients clipped to `train.gradient_clip`, and the update with the learning
        rate's schedule, unless the loss or the gradient is not finite (the caller decides)."""
        distributed = self.distributed
        lengths = self.corpus.train.target_lengths(indices)
        seed = self.config.train.seed
        cutting, pieces = self.attention_start.in_pieces(self.progress, self.model, batch, self.vocabulary, seed)
        heard, utterances = None, len(batch.ids)  # heard: utterances for the CTC head alone, in a step in pieces
        if pieces is not None:
            batch, heard = pieces.pieces, pieces.heard
            counted = [part.target_lengths.cpu() for part in (batch, heard) if part is not None]
            # Each rank cuts its own utterances: the global batch's characters taken as this rank's times the ranks.
            lengths = torch.cat(counted).repeat(distributed.world_size)
        ctc_alone = self.attention_start.ctc_alone(self.progress.step, self.progress.alignment_start)
        ctc_weight = 1.0 if ctc_alone else None
        if ctc_alone:  # the waiting speller reads nothing it would learn from
            batch = batch.unspelt()
        loss, parts = self.optimisation.loss(batch, lengths, forcing, augment, cutting, ctc_weight)
        frames = batch.feature_lengths.sum()
        if heard is not None:  # their loss per character of the whole step, as if in one batch with the pieces
            heard_loss, heard_parts = self.optimisation.loss(heard, lengths, forcing, augment, ctc_weight=ctc_weight)
            loss, frames = loss + heard_loss, frames + heard.feature_lengths.sum()
            parts = parts | {name: parts[name] + value for name, value in heard_parts.items()}
        if cutting:  # this rank's share of the ranks whose batch was cut, and of the utterances heard whole
            unspelt = sum(len(part.ids) for part in (batch, heard) if part is not None and part.speller_steps == 1)
            share = loss.new_tensor([pieces is not None and pieces.divided, unspelt / utterances])
            parts = parts | dict(zip(("cut", "heard"), share / distributed.world_size, strict=True))
        frozen = self.config.train.frozen_in(self.progress.epoch) + (("speller",) if ctc_alone else ())
        norm = self.optimisation.backward(loss, distributed.world_size, frozen)
        # One read of the device per step, after the backward pass is queued: each read waits for
        # the GPU to finish, and the host queues nothing while it waits.
        read = torch.stack([value.float() for value in (loss.detach(), norm, *parts.values())]).tolist()
        local_loss, local_norm, *local_parts = read
        # One reduction gives every rank the global batch's loss, its parts and frame count,
        # and whether any rank was asked to stop or to save: all act on them together. The
        # gradient norm is already the global batch's (DDP reduced the gradients).
        total, frames, stop, save, *values = distributed.sum(
            [
                local_loss,
                float(frames),
                float(self.stop_requests.requested),
                float(distributed.is_main and self.checkpoint_due()),
                *local_parts,
            ]
        )
        finite = math.isfinite(total) and math.isfinite(local_norm)
        learning_rate = self.optimisation.step(finite)
        named_parts = dict(zip(parts, values, strict=True))
        self.progress.ctc_loss = named_parts.get("ctc_loss")
        norm_value = local_norm if finite else math.nan
        return Step(total, named_parts, int(frames), norm_value, learning_rate, bool(stop), bool(save))

    def loader(self, batches: list[list[int]]) -> torch.utils.data.DataLoader:
        """This rank's share of `batches` (of the epoch where training stands), loaded while it trains."""
        progress, dataset = self.progress, self.corpus.train
        first = progress.batch_in_epoch
        return training_loader(
            dataset, batches, progress.epoch, first, self.config, self.distributed.shard, self.device
        )

    def finish_epoch(self) -> None:
        """Decode dev, log the epoch, save `last.pt` (and `best.pt` when dev CER improved)."""
        progress = self.progress
        started = time.perf_counter()
        plot = self.out / "attention" / f"epoch_{progress.epoch + 1:03d}.png"
        dev = evaluate_dev(self.model, self.corpus.dev, self.search, self.config, self.device, plot, self.distributed)
        dev_cer = dev.cer
        seconds = progress.train_seconds + time.perf_counter() - started
        learning_rate = self.optimisation.scheduler.get_last_lr()[0]
        record = epoch_record(progress, dev, seconds, learning_rate, self.teacher_forcing())
        if (captured := self.optimisation.captured_graphs()) is not None:
            record["captured_graphs"] = captured
        self.progress = progress.next_epoch(dev_cer, seconds)
        dropped = []
        if self.distributed.is_main:
            append_line(self.out / "metrics.jsonl", json.dumps(record))
            count = self.config.train.average_best  # snapshots to average at the end
            if count >= 2:
                state, candidate = self.model.state_dict(), (dev_cer, record["epoch"])
                self.progress.snapshots, dropped = keep_snapshot(
                    self.out, state, self.progress.snapshots, candidate, count
                )
        # best.pt before last.pt: a run killed between the two re-runs this epoch exactly on resume.
        if dev_cer <= self.progress.best_cer:  # the same dev CER on every rank
            self.save(self.out / "best.pt")
        self.save(self.out / "last.pt")
        if not self.distributed.is_main:
            return
        for _, epoch in dropped:  # only now: last.pt no longer lists them
            snapshot_path(self.out, epoch).unlink(missing_ok=True)
        examples = list(zip(self.corpus.dev.ids, self.corpus.dev.texts, dev.texts, strict=False))[:EXAMPLES]
        self.monitor.epoch(record, plot if dev.alignment is not None else None, examples)
        self.monitor.unaligned(dev.unaligned(), record["step"], self.attention_start.advice())
        tqdm.write(epoch_line(record, self.progress.best_cer))

    def write_average(self) -> None:
        """`averaged.pt`: the mean weights of the kept snapshots, with its dev CER beside the best
        single epoch's (`averaged.json`)."""
        states = load_snapshots(self.out, [epoch for _, epoch in self.progress.snapshots])
        if len(states) < 2:
            return
        self.model.load_state_dict(average_states(list(states.values())))
        plot = self.out / "averaged_attention.png"
        dev = evaluate_dev(self.model, self.corpus.dev, self.search, self.config, self.device, plot)
        save_checkpoint(self.out / "averaged.pt", self.config, self.vocabulary, self.corpus.normalizer, self.model, {})
        epochs = sorted(states)
        best = self.progress.best_cer
        summary = {"epochs": epochs, "dev_cer": dev.cer, "dev_reading": dev.reading, "best_epoch_dev_cer": best}
        write_text_atomically(self.out / "averaged.json", json.dumps(summary) + "\n")
        tqdm.write(
            f"averaged epochs {', '.join(map(str, epochs))}: dev CER {dev.cer:.2f}% ({dev.reading}) "
            f"(best epoch {self.progress.best_cer:.2f}%) -> {self.out / 'averaged.pt'}"
        )
