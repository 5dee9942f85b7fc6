"""What a training step does to the model: the loss of a batch as the model runs in training
(compiled, data-parallel, or with its speller as CUDA graphs; SpecAugment; mixed precision), and
the update: Adam, the learning rate's schedule, fp16's loss scaler, frozen parts and gradient
clipping. `las.training.train.Trainer` decides which batches, and what the ranks agree on between the two."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from las.core.config import Config
from las.core.device import autocast, resolve_precision
from las.core.errors import LasError
from las.data.augmentation.augmenter import spec_augment
from las.data.dataset import Batch
from las.model.alignment import diagonal_rows
from las.model.graphed_listener import GraphedListener
from las.model.graphed_speller import GraphedSpeller
from las.model.las import LAS
from las.model.listener import Listener
from las.model.losses import joint_loss
from las.model.speller import Speller
from las.training.distributed import Distributed


def learning_rate_scale(step: int, warmup_steps: int, total_steps: int, final_scale: float) -> float:
    """Linear warm-up to 1, then cosine decay to `final_scale` at `total_steps`."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
    return final_scale + (1 - final_scale) * 0.5 * (1 + math.cos(math.pi * progress))


class Optimisation:
    """The model's training steps over `total_steps` (the schedule's length) on `device`, at
    `learning_rate` before its schedule (None: train.learning_rate)."""

    def __init__(
        self,
        config: Config,
        model: LAS,
        device: torch.device,
        distributed: Distributed,
        total_steps: int,
        learning_rate: float | None = None,
    ) -> None:
        settings = config.train
        self.config = config
        self.model = model
        self.device = device
        self.world_size = distributed.world_size
        self.precision = resolve_precision(device, settings.precision)
        # fp16 gradients underflow unscaled; the scaler is a no-op in every other precision.
        self.scaler = torch.amp.GradScaler(device.type, enabled=self.precision == "fp16")
        if settings.compile:
            # Many small kernels per output character (Speller.advance): what compilation fuses. Shapes vary by batch.
            speller = model.speller
            if isinstance(speller, Speller):
                speller.advance = torch.compile(speller.advance, dynamic=True)
            else:  # one pass over all characters
                speller.forward = torch.compile(speller.forward, dynamic=True)
        self.network = distributed.wrap(model, device)  # what training steps call
        self.spell, self.listen = (
            graphed_passes(config, model, device, distributed) if settings.cuda_graphs else (None, None)
        )
        self.optimizer = torch.optim.Adam(
            model.parameters(), lr=learning_rate or settings.learning_rate, weight_decay=settings.weight_decay
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda step: learning_rate_scale(
                step, settings.warmup_steps, total_steps, settings.final_learning_rate_scale
            ),
        )

    def loss(
        self,
        batch: Batch,
        global_lengths: torch.Tensor,
        forcing: float,
        augment: bool,
        alignment: bool = False,
        ctc_weight: float | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """This rank's share of a global batch's loss (whose targets have `global_lengths`
        characters: ranks' losses add up to the global batch's), and its parts for the log;
        with `alignment`, a part "diagonal_share": the share of the batch whose attention runs along a diagonal;
        `ctc_weight`: the CTC loss's weight λ in this step, `model.ctc_weight` where None (at 1 the
        CTC loss alone; the attention's is still a part, for the log)."""
        settings = self.config.train
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
        # The speller reads as many steps as the batch asks (one, where the CTC head alone learns); CTC all.
        steps = batch.speller_steps or batch.targets_in.shape[1]
        targets_in, targets_out = batch.targets_in[:, :steps], batch.targets_out[:, :steps]
        # A CUDA graph cannot capture autocast's cache of cast weights.
        with autocast(self.device, self.precision, cache=self.spell is None and self.listen is None):
            output = self.network(features, batch.feature_lengths, targets_in, forcing, self.spell, self.listen)
            loss, parts = joint_loss(
                output,
                batch.targets_in,
                targets_out,
                batch.target_lengths,
                self.config.model.ctc_weight if ctc_weight is None else ctc_weight,
                settings.label_smoothing,
                global_lengths,
            )
            if alignment:  # this rank's share of the mean over ranks
                # A batch heard by the CTC head alone has one speller step: none of its rows is.
                spelt = (batch.target_lengths - 1).clamp(max=steps)
                rows = diagonal_rows(output.attention, spelt, output.memory.lengths)
                parts["diagonal_share"] = rows.float().mean() / self.world_size
            return loss, parts

    def backward(self, loss: torch.Tensor, ranks: int, frozen: Sequence[str]) -> torch.Tensor:
        """Back-propagate `loss` over `ranks` processes, without gradients for the `frozen` parts,
        and clip: the gradient norm before clipping, `()` on the device (not finite: a loss or a
        gradient was not, and `step` must skip the update). Nothing here waits for the GPU."""
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss * ranks).backward()  # DDP averages over ranks
        for name, parameter in self.model.named_parameters() if frozen else ():
            if name.split(".")[0] in frozen:
                parameter.grad = None  # without a gradient, Adam leaves a weight as it is
        self.scaler.unscale_(self.optimizer)  # clip the true gradients
        return clip_gradients(self.model, self.config.train.gradient_clip)

    def step(self, finite: bool) -> float:
        """The update after `backward`, if its loss and gradient norm were `finite` on every rank:
        the learning rate used (NaN: no update)."""
        if not finite:
            if self.scaler.is_enabled():
                self.scaler.update()  # fp16 overflowed at this scale (or the loss did): a smaller one next time
            return math.nan
        learning_rate = self.scheduler.get_last_lr()[0]
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.scheduler.step()
        return learning_rate

    def state_dict(self) -> dict[str, dict]:
        return {
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
        }

    def captured_graphs(self) -> int | None:
        """How many bucket shapes have been captured as CUDA graphs so far (None without graphs):
        each new one costs a capture, so a slow epoch with new ones is capturing, not training."""
        graphed = [passes for passes in (self.spell, self.listen) if passes is not None]
        return sum(len(passes.passes) for passes in graphed) if graphed else None

    def load_state_dict(self, state: dict[str, dict]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state.get("scaler", {}))


def graphed_passes(
    config: Config, model: LAS, device: torch.device, distributed: Distributed
) -> tuple[GraphedSpeller | None, GraphedListener | None]:
    """The LSTM speller's pass and the pyramid listener's as CUDA graphs (train.cuda_graphs),
    whichever the model has. The others run as they are: a Transformer speller spells every
    character in one pass, and self-attention listeners' time is not spent in launches."""
    if device.type != "cuda":
        raise LasError(f"config key 'train.cuda_graphs': needs a CUDA device, training runs on {device}")
    if distributed.enabled:
        raise LasError("config key 'train.cuda_graphs': one process only, not under torchrun")
    most_rows = 0 if config.data.batch_frames else config.data.batch_size
    spell = GraphedSpeller(model.speller, True, most_rows) if isinstance(model.speller, Speller) else None
    listen = GraphedListener(model.listener, True, most_rows) if isinstance(model.listener, Listener) else None
    return spell, listen


def clip_gradients(model: LAS, limit: float) -> torch.Tensor:
    """Clip the gradient norm to `limit`; the norm before clipping, `()` on the device."""
    return torch.nn.utils.clip_grad_norm_(model.parameters(), limit)
