"""Does the speller listen? The teacher-forced cross-entropy of a set's transcripts (per
character, no label smoothing) with each utterance's own listener output, and with another
utterance's: every batch's memories moved one row on. A speller that reads the listener loses
much more with the wrong memory; one that has learned only to continue the characters (a
language model of the transcripts) hardly notices. Training's greedy dev CER cannot tell these
apart early in a run: both spell fluent, wrong text.

    python scripts/listening.py runs/ablation/location-cumulative-default/best.pt [...] [--manifest data/an4/dev.tsv]
"""

from __future__ import annotations

from pathlib import Path

import torch
import typer
from harness import header

from las.data.corpora.manifest import read_utterances
from las.data.dataset import BucketBatchSampler, SpeechDataset
from las.model.checkpoint import load_checkpoint
from las.model.listener import ListenerOutput
from las.model.losses import attention_loss
from las.recognition.recognizer import Recognizer

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def rotated(memory: ListenerOutput) -> ListenerOutput:
    """Each row gets the next row's whole memory (its frames, mask and length)."""
    order = torch.roll(torch.arange(len(memory.lengths)), shifts=-1)
    return memory.select(order)


@torch.no_grad()
def losses(checkpoint: Path, manifest: Path, batch_size: int) -> tuple[float, float]:
    """Cross-entropy per character with the utterances' own memories and with rotated ones."""
    recognizer = Recognizer(load_checkpoint(checkpoint), "cpu", ["decode.speed=1"])  # as training hears it
    utterances, features = recognizer.utterance_features(read_utterances(manifest, require_text=True), manifest)
    dataset = SpeechDataset(
        [utterance.id for utterance in utterances],
        features,
        [utterance.text for utterance in utterances],
        recognizer.vocabulary,
        normalizer=recognizer.checkpoint.normalizer,
    )
    model = recognizer.model.eval()
    sums, characters = [0.0, 0.0], 0
    for indices in BucketBatchSampler(dataset.frame_counts(), batch_size, 10**9, shuffle=False):
        if len(indices) < 2:  # nothing to rotate with
            continue
        batch = dataset.collate(indices)
        memory = model.listener(batch.features, batch.feature_lengths)
        count = int(batch.target_lengths.sum())
        for slot, heard in enumerate((memory, rotated(memory))):
            logits, _ = model.speller(heard, batch.targets_in, 1.0)
            sums[slot] += float(attention_loss(logits.float(), batch.targets_out, 0.0, count)) * count
        characters += count
    return sums[0] / characters, sums[1] / characters


@app.command()
def main(
    checkpoints: list[Path],
    manifest: Path = Path("data/an4/dev.tsv"),
    batch_size: int = 16,
) -> None:
    """A Markdown row per checkpoint: nats per character with its own memory, with another's."""
    torch.set_num_threads(1)
    print(header("checkpoint", "own memory", "another utterance's", "difference"))
    for checkpoint in checkpoints:
        own, other = losses(checkpoint, manifest, batch_size)
        print(f"| {checkpoint} | {own:.3f} | {other:.3f} | {other - own:.3f} |", flush=True)


if __name__ == "__main__":
    app()
