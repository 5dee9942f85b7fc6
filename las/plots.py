"""Attention heat-maps: output characters against encoder frames, one PNG per call."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no display on training machines

import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from las.search.common import Hypothesis  # noqa: E402
from las.text import EOS, Vocabulary  # noqa: E402


def plot_attention(weights: torch.Tensor, labels: Sequence[str], path: str | Path, title: str) -> None:
    """Save `weights` `(steps, encoder_frames)` with one row per emitted symbol in `labels`."""
    save(attention_figure(weights, labels, title), path)


def attention_figure(weights: torch.Tensor, labels: Sequence[str], title: str) -> Figure:
    """`weights` `(steps, encoder_frames)` as a heat-map, one row per emitted symbol in `labels`."""
    steps, frames = weights.shape
    figure, axes = plt.subplots(figsize=(max(4.0, frames / 8 + 2), max(3.0, steps / 5 + 1.5)))
    axes.imshow(weights.numpy(), aspect="auto", origin="upper", cmap="viridis", vmin=0.0, interpolation="nearest")
    axes.set_yticks(range(steps), [label if label != " " else "␣" for label in labels], fontsize=7)
    axes.set_xlabel("encoder frame")
    axes.set_ylabel("output character")
    axes.set_title(title, fontsize=9)
    figure.tight_layout()
    return figure


def save(figure: Figure, path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80)
    plt.close(figure)


def hypothesis_figure(identifier: str, hypothesis: Hypothesis, vocabulary: Vocabulary) -> Figure | None:
    """The attention of one decoded utterance, titled with its id and text (None for CTC decoding)."""
    if hypothesis.attention is None:
        return None
    labels = [vocabulary.symbols[index] for index in hypothesis.tokens] + [EOS]
    return attention_figure(hypothesis.attention, labels, f"{identifier}: {vocabulary.decode(hypothesis.tokens)!r}")


def plot_hypothesis(identifier: str, hypothesis: Hypothesis, vocabulary: Vocabulary, path: str | Path) -> None:
    figure = hypothesis_figure(identifier, hypothesis, vocabulary)
    if figure is not None:
        save(figure, path)
