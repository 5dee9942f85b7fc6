"""Run a decoding strategy over a dataset in length-bucketed batches: shared by training's dev
pass and `las decode`, so both report the same transcripts."""

from __future__ import annotations

import dataclasses

import torch

from las.core.config import ConfidenceMeasure, ConfidenceSource, WordTimes
from las.core.progress import progress_bar
from las.core.stopping import deferred_interrupts
from las.core.text import PAD_INDEX, SOS_INDEX
from las.core.threads import follow_load
from las.data.dataset import BucketBatchSampler, SpeechDataset
from las.model.las import LAS
from las.model.listener import ListenerOutput
from las.recognition.confidence import confidences, ctc_confidences
from las.recognition.timing import token_spans
from las.search import Hypothesis, Strategy


@torch.no_grad()
def transcribe(
    model: LAS,
    dataset: SpeechDataset,
    strategy: Strategy,
    batch_size: int,
    max_batch_frames: int,
    device: torch.device,
    description: str = "decode",
    align: WordTimes | None = None,
    confidence: tuple[ConfidenceMeasure, ConfidenceSource] | None = None,
) -> list[list[Hypothesis]]:
    """n-best hypotheses for every utterance of `dataset`, in dataset order; with `align`, the best
    one of each knows the encoder frames of its characters (`Hypothesis.spans`), found that way,
    and with `confidence` too, how far to trust each (`Hypothesis.confidences`)."""
    was_training = model.training
    model.eval()
    sampler = BucketBatchSampler(dataset.frame_counts(), batch_size, max_batch_frames, shuffle=False)
    results: list[list[Hypothesis]] = [[] for _ in range(len(dataset))]
    with deferred_interrupts() as stop_if_interrupted:  # Ctrl-C lands between batches
        for indices in progress_bar(sampler, description, "batch"):
            stop_if_interrupted()
            follow_load()
            batch = dataset.collate(indices).to(device)
            memory = model.listener(batch.features, batch.feature_lengths)
            found = strategy.search(model, memory)
            if align:
                found = aligned(model, memory, found, align, confidence)
            for index, hypotheses in zip(indices, found, strict=True):
                results[index] = hypotheses
    model.train(was_training)
    return results


def aligned(
    model: LAS,
    memory: ListenerOutput,
    found: list[list[Hypothesis]],
    method: WordTimes,
    confidence: tuple[ConfidenceMeasure, ConfidenceSource] | None = None,
) -> list[list[Hypothesis]]:
    """`found` with the best hypothesis of each utterance aligned to its encoder frames by
    `method`, or the other one where that is impossible (no CTC head; no attention weights); with
    `confidence` (a measure, and whose distributions), each of its tokens' (las.recognition.confidence)."""
    ctc_log_probs = None
    measure, source = confidence if confidence else (None, None)
    wanted = method == "ctc" or source in ("both", "ctc") or any(nbest[0].attention is None for nbest in found)
    if model.ctc_head is not None and wanted:
        ctc_log_probs = model.ctc_head(memory.hidden).float().log_softmax(dim=-1)  # (batch, frames, vocabulary)
    speller = spelled(model, memory, [nbest[0].tokens for nbest in found]) if source in ("both", "speller") else None
    result = []
    for row, hypotheses in enumerate(found):
        best = hypotheses[0]
        length = int(memory.lengths[row])
        use_ctc = ctc_log_probs is not None and (method == "ctc" or best.attention is None)
        log_probs = ctc_log_probs[row, :length] if use_ctc else None
        spans, aligned_by = token_spans(best.tokens, log_probs, best.attention, PAD_INDEX)  # blank is <pad>
        measured = []
        if speller is not None and best.tokens:
            tokens = torch.tensor(best.tokens, device=speller.device)
            measured.append(confidences(speller[row, : len(best.tokens)], tokens, measure))
        if source in ("both", "ctc") and ctc_log_probs is not None and aligned_by == "ctc":
            measured.append(ctc_confidences(ctc_log_probs[row, :length], best.tokens, spans, measure))
        trust = (sum(measured) / len(measured)).tolist() if measured else None
        result.append(
            [dataclasses.replace(best, spans=spans, aligned_by=aligned_by, confidences=trust), *hypotheses[1:]]
        )
    return result


def spelled(model: LAS, memory: ListenerOutput, hypotheses: list[list[int]]) -> torch.Tensor:
    """`(rows, steps, vocabulary)` the speller's log-probabilities at each step of each row's
    hypothesis, fed its own characters (what the search scored them with)."""
    device = memory.hidden.device
    steps = max(len(tokens) for tokens in hypotheses) + 1
    targets = torch.full((len(hypotheses), steps), PAD_INDEX, dtype=torch.long)
    for row, tokens in enumerate(hypotheses):
        targets[row, : len(tokens) + 1] = torch.tensor([SOS_INDEX, *tokens])
    logits, _ = model.speller(memory, targets.to(device), 1.0)
    return logits.float().log_softmax(dim=-1)
