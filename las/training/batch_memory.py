"""`data.batch_memory`: batches by frames sized from the GPU's memory.

A batch's training memory is nearly a line in its padded frames: a fixed part (the weights, their
gradients, cuDNN's workspace) and the activations, which grow with the frames. A new run on CUDA
measures the peak of a training step on batches of the corpus's longest utterances (the most
memory per frame: the attention's energies grow with characters x encoder frames) at two
budgets, fits the line, and takes the largest budget whose step stays within the share. A step at
that budget checks it, and the budget shrinks until one fits, since the line is only nearly one.
The result goes into the run's config as `data.batch_frames`, which a resumed run keeps, so its
batches are exactly those it began with.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch

from las.core.config import Config
from las.core.errors import LasError
from las.core.progress import say
from las.data.dataset import Draw, SpeechDataset, in_pairs
from las.model.las import LAS
from las.training.distributed import Distributed

QUANTUM = 1000  # budgets are whole thousands of frames
GIB = 2**30

# A probe's peak memory in bytes at a budget of padded frames; None: it ran out of memory.
PeakMemory = Callable[[int], int | None]


def largest_budget(peak_memory: PeakMemory, limit: int, smallest: int, most: int | None = None, probes: int = 6) -> int:
    """The largest budget, a multiple of QUANTUM and at least `smallest`, whose probe peaks within
    `limit` bytes, or `most` where that fits, in at most `probes` probes (one more where `most` is
    the first budget probed after the smallest). Each next budget is where a line reaches the limit:
    through the two largest budgets that fitted, or, once one has not, between it and the largest
    that did (a curve that bends up then comes closer from below). A budget that runs out of
    memory is halved back towards the largest that fitted."""
    low = QUANTUM * math.ceil(smallest / QUANTUM)
    first = peak_memory(low)
    if first is None or first > limit:
        needs = "more" if first is None else f"{first / GIB:.2f} GiB"
        raise LasError(
            f"config key 'data.batch_memory': {limit / GIB:.2f} GiB does not hold a training step on "
            f"{low} frames of the longest utterances (it needs {needs}); raise the share or set data.batch_frames"
        )
    if most is not None and most <= low:
        return most

    def crossing(one: tuple[int, int], other: tuple[int, int]) -> int:
        """Where the line through two (frames, peak) points reaches the limit, in whole QUANTUMs."""
        (frames, peak), (other_frames, other_peak) = sorted((one, other))
        per_frame = max(other_peak - peak, 1) / (other_frames - frames)
        return QUANTUM * math.floor((frames + (limit - peak) / per_frame) / QUANTUM)

    fitted = [(low, first)]  # budgets that fitted and their peaks, the largest last
    over: tuple[int, int] | None = None  # the smallest budget past the limit, and its peak
    ceiling = math.inf  # the smallest budget known not to fit
    budget = most or 4 * low
    for _ in range(probes - 1):
        peak = peak_memory(budget)
        if peak is None:
            ceiling = budget
            budget = QUANTUM * ((fitted[-1][0] + budget) // (2 * QUANTUM))
        elif peak <= limit:
            fitted.append((budget, peak))
            budget = crossing(fitted[-1], over or fitted[-2])
        else:
            over, ceiling = (budget, peak), budget
            budget = crossing(fitted[-1], over)
        budget = min(budget, ceiling - QUANTUM, most or math.inf)
        if budget <= fitted[-1][0]:
            break
    return fitted[-1][0]


class StepProbe:
    """The peak memory on `device` of a training step of `model` (forward and backward, eager, in
    the run's precision, plus Adam's two moments) on a batch of `dataset`'s longest utterances, as
    many as the sampler puts in a budget of padded frames, each at its slowest speed (the most
    frames it can have), joined in pairs where some batches are (`train.augment.joined`). The
    model's weights and the run's random state are left as they were."""

    def __init__(self, config: Config, model: LAS, dataset: SpeechDataset, device: torch.device) -> None:
        # Imported here: las.training.optimisation's graphed passes are not this module's to load.
        from las.training.optimisation import Optimisation

        eager = dataclasses.replace(config.train, cuda_graphs=False, compile=False)
        self.optimisation = Optimisation(dataclasses.replace(config, train=eager), model, device, Distributed(), 1)
        self.dataset = dataset
        self.device = device
        self.joined = config.train.augment.joined > 0
        self.slowest = min(range(len(dataset.speeds)), key=lambda variant: dataset.speeds[variant])
        lengths = torch.tensor(dataset.frame_counts())
        self.longest = torch.argsort(lengths, descending=True, stable=True)[:64].tolist()
        self.longest_frames = int(lengths[self.longest[0]])  # as the sampler counts them
        # Adam keeps two float32 moments of every weight; the probe takes no update.
        self.moments = 2 * 4 * sum(parameter.numel() for parameter in model.parameters() if parameter.requires_grad)

    def __call__(self, budget: int) -> int | None:
        rows = max(1, budget // self.longest_frames)
        draws = [Draw(self.longest[row % len(self.longest)], self.slowest, None) for row in range(rows)]
        if self.joined:  # the same frames in half the rows: each row's attention twice as long
            draws = in_pairs(draws)
        batch = self.dataset.collate(draws)
        optimisation = self.optimisation
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(self.device)
        try:
            batch = batch.to(self.device)
            with torch.random.fork_rng(devices=[self.device]):
                loss, _ = optimisation.loss(batch, batch.target_lengths, 1.0, augment=False)
                optimisation.backward(loss, 1, ())
            torch.cuda.synchronize(self.device)
            return torch.cuda.max_memory_allocated(self.device) + self.moments
        except torch.cuda.OutOfMemoryError:
            return None
        finally:
            optimisation.optimizer.zero_grad(set_to_none=True)


def sized_batches(
    config: Config, model: LAS, dataset: SpeechDataset, device: torch.device, distributed: Distributed
) -> Config:
    """`config` with `data.batch_frames` sized from the GPU's memory (`data.batch_memory` of its
    total), where the run trains on CUDA; as it is elsewhere. A `data.batch_frames` already set is
    the recipe's (its learning rate and schedule were found for it): it is kept where it fits, and
    lowered to what does where it does not. Under torchrun every rank probes its own GPU for its
    share of a batch, and the smallest holds for all."""
    share = config.data.batch_memory
    if not share:
        return config
    if device.type != "cuda":
        if distributed.is_main:
            say(f"data.batch_memory: training on {device.type}; batches as data.batch_frames and batch_size set them")
        return config
    free, total = torch.cuda.mem_get_info(device)
    # What other processes hold is not this run's to take.
    limit = min(int(share * total), free + torch.cuda.memory_allocated(device))
    probe = StepProbe(config, model, dataset, device)
    ranks, wanted = distributed.world_size, config.data.batch_frames
    local = largest_budget(probe, limit, probe.longest_frames, math.ceil(wanted / ranks) if wanted else None)
    budget = min(ranks * min(rank_budget for (rank_budget,) in distributed.gather([local])), wanted or math.inf)
    if distributed.is_main:
        kept = f"data.batch_frames {wanted} fits" if budget == wanted else f"batches of {budget} padded frames"
        say(f"data.batch_memory {share:g}: {kept} (a step within {limit / GIB:.1f} of the GPU's {total / GIB:.1f} GiB)")
    return dataclasses.replace(config, data=dataclasses.replace(config.data, batch_frames=budget))
