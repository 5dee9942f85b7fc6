"""Run a decoding strategy over a dataset in length-bucketed batches: shared by training's dev
pass and `las decode`, so both report the same transcripts."""

from __future__ import annotations

import torch

from las.data.dataset import BucketBatchSampler, SpeechDataset
from las.model.las import LAS
from las.progress import progress_bar
from las.search import Hypothesis, Strategy
from las.stopping import deferred_interrupts


@torch.no_grad()
def transcribe(
    model: LAS,
    dataset: SpeechDataset,
    strategy: Strategy,
    batch_size: int,
    max_batch_frames: int,
    device: torch.device,
    description: str = "decode",
) -> list[list[Hypothesis]]:
    """n-best hypotheses for every utterance of `dataset`, in dataset order."""
    was_training = model.training
    model.eval()
    sampler = BucketBatchSampler(dataset.frame_counts(), batch_size, max_batch_frames, shuffle=False)
    results: list[list[Hypothesis]] = [[] for _ in range(len(dataset))]
    with deferred_interrupts() as stop_if_interrupted:  # Ctrl-C lands between batches
        for indices in progress_bar(sampler, description, "batch"):
            stop_if_interrupted()
            batch = dataset.collate(indices).to(device)
            memory = model.listener(batch.features, batch.feature_lengths)
            for index, hypotheses in zip(indices, strategy.search(model, memory), strict=True):
                results[index] = hypotheses
    model.train(was_training)
    return results
