"""Where the pieces are cut (las.training.pieces): a young CTC head's cuts against a trained one's.

    python scripts/cuts.py runs/scale/small/heads-at-first-cut/seed-3.pt \\
        runs/scale/small/ctc-first-whole/seed-2/averaged.pt runs/scale/small/train.tsv

For each utterance of the manifest, each head's forced alignment of its transcript gives a cut
between every two words, at the middle of their pause, as training cuts pieces. Printed: how far
the young head's cuts fall from the reference's (signed: negative is earlier), by the young
head's CTC loss per character on the utterance (what gates an utterance's cutting); and how loud
the frames are that each cuts on: the rank of the frame's log-mel energy among its recording's
frames (0 the quietest, 1 the loudest), before and after each cut moves to the quietest frame
within `--reach` seconds (`train.attention_pieces_quiet_seconds`, chosen by the normalised
features' mean as in training). A cut on a loud frame splits a word between two pieces.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
import typer
from harness import header, row

from las.core.text import PAD_INDEX
from las.data.manifest import read_utterances
from las.data.segmentation import frame_energy
from las.export.runtime import load_model
from las.model.ctc_path import ctc_frames_needed, runs, viterbi_path
from las.recognition.recognizer import Recognizer
from las.recognition.timing import smoothed
from las.training.pieces import pause_middles, quietest, word_spans

LOSS_EDGES = [0.0, 1.0, 1.25, 1.5, 2.0, float("inf")]  # nats a character


def head(path: Path) -> Recognizer:
    recognizer = Recognizer(load_model(path), "cpu", ["decode.speed=1"])  # features as training reads them
    recognizer.model.eval()
    return recognizer


def cuts(recognizer: Recognizer, features: torch.Tensor, tokens: list[int]) -> tuple[float, list[int]] | None:
    """The head's CTC loss per character on the utterance and its cuts (input frames, the
    recording's edges included); None where its encoder frames cannot spell `tokens`."""
    with torch.no_grad():
        normalised = recognizer.checkpoint.normalizer(features)[None]
        memory = recognizer.model.listener(normalised, torch.tensor([len(features)]))
        log_probs = recognizer.model.ctc_head(memory.hidden).float().log_softmax(-1)[0, : int(memory.lengths[0])]
    if not tokens or len(log_probs) < ctc_frames_needed(tokens):
        return None
    loss = F.ctc_loss(
        log_probs[:, None], torch.tensor([tokens]), torch.tensor([len(log_probs)]), torch.tensor([len(tokens)]),
        blank=PAD_INDEX, reduction="sum",
    ).item()  # fmt: skip
    space = recognizer.vocabulary.index[" "]
    words = word_spans(tokens, runs(viterbi_path(log_probs, tokens, PAD_INDEX), PAD_INDEX), space)
    return loss / len(tokens), pause_middles(words, len(log_probs), len(features))


def loudness_ranks(energy: torch.Tensor, positions: list[int]) -> list[float]:
    """The rank of each interior position's energy (averaged over DIP_FRAMES) among the recording's frames."""
    order = smoothed(energy).argsort().argsort().float() / len(energy)
    return [float(order[min(position, len(energy) - 1)]) for position in positions[1:-1]]


def share(values: list[float], test: Callable[[float], bool]) -> str:
    """The share of `values` that pass `test`, for a table cell."""
    return f"{sum(map(test, values)) / len(values):.2f}"


def main(
    young: Path,
    reference: Path,
    manifest: Path,
    reach: float = typer.Option(0.2, help="seconds a cut may move to a quieter frame"),
) -> None:
    torch.set_num_threads(1)
    young_head, reference_head = head(young), head(reference)
    utterances, features = young_head.utterance_features(read_utterances(manifest, require_text=True), manifest)
    reach_frames = round(reach / young_head.frame_seconds())
    errors: dict[int, list[float]] = {edge: [] for edge in range(len(LOSS_EDGES) - 1)}  # ms, by loss bin
    ranks: dict[str, list[float]] = {name: [] for name in ("young", "young, moved", "reference", "reference, moved")}
    for utterance, found in zip(utterances, features, strict=True):
        found = torch.as_tensor(found).float()
        tokens = young_head.vocabulary.encode(utterance.text)
        mine, theirs = cuts(young_head, found, tokens), cuts(reference_head, found, tokens)
        if mine is None or theirs is None or len(mine[1]) < 3:
            continue
        (loss, young_cuts), (_, reference_cuts) = mine, theirs
        frame_ms = 1000 * young_head.frame_seconds()
        bin_index = next(index for index, edge in enumerate(LOSS_EDGES[1:]) if loss < edge)
        errors[bin_index] += [frame_ms * (a - b) for a, b in zip(young_cuts[1:-1], reference_cuts[1:-1], strict=True)]
        energy = frame_energy(found)
        loudness = young_head.checkpoint.normalizer(found).float().mean(dim=1)  # as training moves them
        for name, positions in (("young", young_cuts), ("reference", reference_cuts)):
            ranks[name] += loudness_ranks(energy, positions)
            ranks[f"{name}, moved"] += loudness_ranks(energy, quietest(positions, loudness, reach_frames))
    print(f"young head {young}\nreference {reference}\n{manifest}, moved within {reach} s\n")
    print(header("young head's CTC loss, nats a character", "cuts", "median error ms", "quartiles ms", "off > 100 ms"))
    everything = [error for values in errors.values() for error in values]
    for index, values in [*errors.items(), (None, everything)]:
        if values:
            low, _, high = statistics.quantiles(values, n=4)
            label = "all" if index is None else f"{LOSS_EDGES[index]:.2f}-{LOSS_EDGES[index + 1]:.2f}"
            off = share(values, lambda error: abs(error) > 100)
            print(row(label, len(values), f"{statistics.median(values):.0f}", f"{low:.0f} / {high:.0f}", off))
    print()
    print(header("cuts", "loudness rank, median", "under 0.2", "over 0.5 (louder than the median frame)"))
    for name, values in ranks.items():
        print(
            row(
                name,
                f"{statistics.median(values):.2f}",
                share(values, lambda r: r < 0.2),
                share(values, lambda r: r > 0.5),
            )
        )


if __name__ == "__main__":
    typer.run(main)
