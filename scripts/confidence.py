"""How well las's word confidences tell wrong words from right ones (issue 29).

    python scripts/confidence.py CHECKPOINT... [--manifest data/an4/dev.tsv]... [--plot FILE.png]

Each checkpoint (one per seed) decodes the manifest with the default decoding, once per
confidence measure (`decode.confidence`: entropy, probability) and source
(`decode.confidence_from`: both, speller, ctc). Every hypothesis word is right
or wrong by the cheapest word alignment to its reference (las.core.metrics.correct_words). A measure
is as good as its AUC-ROC at flagging wrong words: the chance that a wrong word is less confident
than a right one (0.5 for a coin, 1 for a perfect flag). Beside it, what `decode.min_confidence`
at a few thresholds would leave out: the share of the wrong words and of the right ones. And
NeMo's two other measures: NCE, the normalised cross-entropy (how much the confidences say about
right and wrong beyond the share of right words: 1 is all, 0 nothing, below 0 misleading), and
ECE, the expected calibration error (over 10 bins of confidence, how far the share of right
words lies from the mean confidence: 0 is calibrated). `--plot` draws the reliability diagram
of the default measure, one line per manifest.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path

import typer

from las import Recognizer
from las.core.metrics import correct_words
from las.data.corpora.manifest import read_utterances
from las.model.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parent.parent
MEASURES = [(measure, source) for source in ("both", "speller", "ctc") for measure in ("entropy", "probability")]
THRESHOLDS = (0.3, 0.4, 0.5, 0.6)

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def scored_words(
    checkpoint: Path, manifest: Path, measure: str, source: str, settings: Sequence[str] = ()
) -> list[tuple[float, bool]]:
    """(confidence, right) of every hypothesis word of the manifest's recordings, decoded with
    `settings` (`decode.*` assignments) over the defaults."""
    assignments = [*settings, f"decode.confidence={measure}", f"decode.confidence_from={source}"]
    recognizer = Recognizer(load_checkpoint(checkpoint), "cpu", assignments)
    references = {utterance.id: utterance.text for utterance in read_utterances(manifest)}
    found = []
    for result in recognizer.transcribe(manifest):
        right = correct_words([word.word for word in result.words], references[result.id].split())
        found += [(word.confidence, flag) for word, flag in zip(result.words, right, strict=True)]
    return found


def auc_wrong(words: list[tuple[float, bool]]) -> float:
    """The chance that a wrong word is less confident than a right one (ties count half)."""
    wrong = [confidence for confidence, right in words if not right]
    good = [confidence for confidence, right in words if right]
    if not wrong or not good:
        return float("nan")
    below = sum((low < high) + 0.5 * (low == high) for low in wrong for high in good)
    return below / (len(wrong) * len(good))


@app.command()
def measure(
    checkpoints: list[Path] = typer.Argument(..., help="One checkpoint per seed."),
    manifests: list[Path] = typer.Option([ROOT / "data" / "an4" / "dev.tsv"], "--manifest"),
    plot: Path | None = typer.Option(None, help="Reliability diagram of the default measure (PNG)."),
    settings: list[str] = typer.Option([], "--set", help="decode.* settings for every decoding."),
) -> None:
    reliability = {}
    for manifest in manifests:
        rows = {
            name: [scored_words(checkpoint, manifest, *name, settings) for checkpoint in checkpoints]
            for name in MEASURES
        }
        words = rows[MEASURES[0]]
        wrong_share = statistics.mean(sum(not right for _, right in seed) / len(seed) for seed in words)
        print(
            f"\n{manifest.name}: {len(checkpoints)} checkpoint(s), {len(words[0])} words per seed, "
            f"{100 * wrong_share:.1f}% of them wrong\n"
        )
        header = " | ".join(f"below {threshold:g}: wrong / right left out, %" for threshold in THRESHOLDS)
        print(f"| measure | from | AUC-ROC, wrong words | NCE | ECE | {header} |")
        print("| --- | --- | --- | --- | --- |" + " --- |" * len(THRESHOLDS))
        for name, seeds in rows.items():
            cells = [spread([metric(seed) for seed in seeds], 3) for metric in (auc_wrong, nce, ece)]
            for threshold in THRESHOLDS:
                wrong = statistics.mean(share(seed, threshold, False) for seed in seeds)
                right = statistics.mean(share(seed, threshold, True) for seed in seeds)
                cells.append(f"{100 * wrong:.0f} / {100 * right:.0f}")
            print(f"| {name[0]} | {name[1]} | " + " | ".join(cells) + " |")
        reliability[manifest.stem] = [word for seed in rows[("probability", "both")] for word in seed]
    if plot is not None:
        plot_reliability(reliability, plot)


def clipped(confidence: float) -> float:
    return min(max(confidence, 1e-6), 1 - 1e-6)


def nce(words: list[tuple[float, bool]]) -> float:
    """Normalised cross-entropy: 1 - (the confidences' cross-entropy with right/wrong) / (that of
    the share of right words given to every word)."""
    right = sum(flag for _, flag in words) / len(words)
    if right in (0, 1):
        return float("nan")
    prior = -(right * math.log(right) + (1 - right) * math.log(1 - right))
    crossed = -statistics.mean(
        math.log(clipped(confidence)) if flag else math.log(1 - clipped(confidence)) for confidence, flag in words
    )
    return (prior - crossed) / prior


def bins(words: list[tuple[float, bool]], count: int = 10) -> list[list[tuple[float, bool]]]:
    """The words in `count` bins of equal width of confidence."""
    binned: list[list[tuple[float, bool]]] = [[] for _ in range(count)]
    for confidence, flag in words:
        binned[min(int(confidence * count), count - 1)].append((confidence, flag))
    return binned


def ece(words: list[tuple[float, bool]]) -> float:
    """Expected calibration error: the words' mean over bins of |share right - mean confidence|."""
    return sum(
        len(part) / len(words) * abs(statistics.mean(f for _, f in part) - statistics.mean(c for c, _ in part))
        for part in bins(words)
        if part
    )


def plot_reliability(words_by_set: dict[str, list[tuple[float, bool]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(4.5, 4.5))
    axis.plot([0, 1], [0, 1], color="grey", linestyle=":", label="calibrated")
    for name, words in words_by_set.items():
        parts = [part for part in bins(words) if len(part) >= 5]
        confidence = [statistics.mean(c for c, _ in part) for part in parts]
        accuracy = [statistics.mean(f for _, f in part) for part in parts]
        axis.plot(confidence, accuracy, marker="o", label=f"{name} (ECE {ece(words):.2f})")
    axis.set_xlabel("word confidence (bin mean)")
    axis.set_ylabel("share of words right")
    axis.set_title("Reliability, probability from both (default)")
    axis.legend(loc="upper left", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)


def share(words: list[tuple[float, bool]], threshold: float, right: bool) -> float:
    chosen = [confidence for confidence, flag in words if flag == right]
    return sum(confidence < threshold for confidence in chosen) / max(1, len(chosen))


def spread(values: list[float], digits: int) -> str:
    return f"{statistics.mean(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


if __name__ == "__main__":
    app()
