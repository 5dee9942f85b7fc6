"""The training loader: an epoch's batches read, augmented and collated by worker processes
while the model trains, the same in any worker, on any rank and after any resume."""

from __future__ import annotations

from collections.abc import Callable

import torch

from las.core.config import Config
from las.data.dataset import BatchDraws, Draw, SpeechDataset


def training_loader(
    dataset: SpeechDataset,
    batches: list[list[int]],
    epoch: int,
    first_batch: int,
    config: Config,
    shard: Callable[[list[Draw]], list[Draw]],
    device: torch.device,
) -> torch.utils.data.DataLoader:
    """This rank's `shard` of `batches` of epoch `epoch` (from 0; the first of them the epoch's
    batch `first_batch`), each utterance in this epoch's variant, read and collated by
    `data.workers` processes (page-locked for a GPU)."""
    settings = config.train
    variants = dataset.variants(epoch, settings.seed)
    # Each utterance's augmentation draw is seeded by (seed, epoch, utterance): the same in any
    # worker, on any rank, after any resume.
    seed = settings.seed * 1_000_003 + epoch * 100_003
    augmenting = epoch >= settings.augment.start_epoch
    items = BatchDraws(batches, variants, seed if augmenting else None, shard, settings.augment.joined, first_batch)
    workers = config.data.workers
    return torch.utils.data.DataLoader(
        dataset,
        batch_sampler=items,
        collate_fn=dataset.batch,
        num_workers=workers,
        # The loader's pinning thread calls CUDA while the main thread may be capturing a CUDA
        # graph (train.cuda_graphs), and in PyTorch 2.11 any thread's such call breaks the
        # capture (cudaErrorStreamCaptureInvalidated); graphed steps copy unpinned batches.
        pin_memory=device.type == "cuda" and not settings.cuda_graphs,
        prefetch_factor=4 if workers else None,
        # Its own generator: starting the loader must not draw from the training's random
        # state, or a run resumed mid-epoch would draw differently from an uninterrupted one.
        generator=torch.Generator().manual_seed(settings.seed),
    )
