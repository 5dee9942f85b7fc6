"""How well las's word confidences tell wrong words from right ones (issue 29).

    python scripts/confidence.py CHECKPOINT... [--manifest data/an4/dev.tsv]

Each checkpoint (one per seed) decodes the manifest with the default decoding, once per
confidence measure (`decode.confidence`: entropy, probability) and source
(`decode.confidence_from`: both, speller, ctc). Every hypothesis word is right
or wrong by the cheapest word alignment to its reference (las.metrics.correct_words). A measure
is as good as its AUC-ROC at flagging wrong words: the chance that a wrong word is less confident
than a right one (0.5 for a coin, 1 for a perfect flag). Beside it, what `decode.min_confidence`
at a few thresholds would leave out: the share of the wrong words and of the right ones.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import typer

from las import Recognizer
from las.data.manifest import read_utterances
from las.metrics import correct_words

ROOT = Path(__file__).resolve().parent.parent
MEASURES = [(measure, source) for source in ("both", "speller", "ctc") for measure in ("entropy", "probability")]
THRESHOLDS = (0.3, 0.4, 0.5, 0.6)

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def scored_words(checkpoint: Path, manifest: Path, measure: str, source: str) -> list[tuple[float, bool]]:
    """(confidence, right) of every hypothesis word of the manifest's recordings."""
    recognizer = Recognizer.load(checkpoint, "cpu", confidence=measure, confidence_from=source)
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
    manifest: Path = typer.Option(ROOT / "data" / "an4" / "dev.tsv"),
) -> None:
    rows = {name: [scored_words(checkpoint, manifest, *name) for checkpoint in checkpoints] for name in MEASURES}
    words = rows[MEASURES[0]]
    share_wrong = statistics.mean(sum(not right for _, right in seed) / len(seed) for seed in words)
    print(f"{len(checkpoints)} checkpoint(s), {len(words[0])} words per seed, {100 * share_wrong:.1f}% of them wrong\n")
    header = " | ".join(f"below {threshold:g}: wrong / right left out, %" for threshold in THRESHOLDS)
    print(f"| measure | from | AUC-ROC, wrong words | {header} |\n| --- | --- | --- |" + " --- |" * len(THRESHOLDS))
    for name, seeds in rows.items():
        cells = [spread([auc_wrong(seed) for seed in seeds], 3)]
        for threshold in THRESHOLDS:
            wrong = statistics.mean(share(seed, threshold, False) for seed in seeds)
            right = statistics.mean(share(seed, threshold, True) for seed in seeds)
            cells.append(f"{100 * wrong:.0f} / {100 * right:.0f}")
        print(f"| {name[0]} | {name[1]} | " + " | ".join(cells) + " |")


def share(words: list[tuple[float, bool]], threshold: float, right: bool) -> float:
    chosen = [confidence for confidence, flag in words if flag == right]
    return sum(confidence < threshold for confidence in chosen) / max(1, len(chosen))


def spread(values: list[float], digits: int) -> str:
    return f"{statistics.mean(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


if __name__ == "__main__":
    app()
