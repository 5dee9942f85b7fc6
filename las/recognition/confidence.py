"""How far to trust each character, word and recording: confidences from the distributions the
model spelled them with.

For each character of the best hypothesis there are two distributions: the speller's at the step
that emitted it (a teacher-forced pass over the hypothesis: what the search scored), and, with a
CTC head, the head's at the frame of the character's aligned span where it is likeliest. Each
gives a confidence in [0, 1]: `entropy`, from the distribution's Tsallis entropy (1 for a certain
choice, 0 for a uniform one; Laptev & Ginsburg 2022 found entropies flag wrong words better than
the maximum probability), or `probability`, the chosen character's own. With both distributions a
character's confidence is their mean. A word is as trustworthy as its least confident character;
a recording's confidence is the mean of its words'.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from las.core.config import ConfidenceMeasure, ConfidenceSource

ENTROPY_ORDER = 1 / 3  # Tsallis's alpha: below 1, the entropy weighs the unlikely symbols more
DIGITS = 4  # a confidence's precision, in the output and against decode.min_confidence alike


def confidences(
    log_probs: torch.Tensor,  # (steps, vocabulary) log-probabilities
    chosen: torch.Tensor,  # (steps,) the symbol taken at each step
    measure: ConfidenceMeasure,
) -> torch.Tensor:
    """`(steps,)` the confidence of each choice, in [0, 1]."""
    if measure == "probability":
        return log_probs.gather(-1, chosen[:, None]).squeeze(-1).exp()
    # Tsallis entropy of order ALPHA, S = (sum p^a - 1) / (1 - a), normalised exponentially:
    # (e^-S - e^-Smax) / (1 - e^-Smax), with Smax that of the uniform distribution. Of the
    # entropies and normalisations Laptev & Ginsburg compare, this one (NeMo's default) spreads
    # the confidences of peaked distributions the most; Gibbs entropy normalised linearly
    # flagged AN4's wrong words worse than the probability (docs/archive/experiments.md, "Confidence").
    alpha, size = ENTROPY_ORDER, log_probs.shape[-1]
    entropy = ((log_probs * alpha).exp().sum(-1) - 1) / (1 - alpha)
    floor = math.exp(-(size ** (1 - alpha) - 1) / (1 - alpha))
    return (((-entropy).exp() - floor) / (1 - floor)).clamp(0, 1)


def ctc_confidences(
    log_probs: torch.Tensor,  # (frames, vocabulary) of the CTC head
    tokens: Sequence[int],
    spans: Sequence[tuple[int, int]],  # [start, end) frames of each token (las.recognition.timing.token_spans)
    measure: ConfidenceMeasure,
) -> torch.Tensor:
    """`(tokens,)` each token's confidence at the frame of its span where it is likeliest."""
    frames = [
        start + int(log_probs[start:end, token].argmax()) for token, (start, end) in zip(tokens, spans, strict=True)
    ]
    return confidences(log_probs[frames], torch.tensor(tokens, device=log_probs.device), measure)


@dataclass(frozen=True)
class CharacterConfidence:
    """One character's confidence as a stream spells it (las.search.monotonic_stream.Judge): by `measure`
    from the distributions of `source` that spelt it, the speller's at its step and the CTC
    head's at its frame, averaged; None where none of them was used."""

    measure: ConfidenceMeasure
    source: ConfidenceSource

    def __call__(self, token: int, speller: torch.Tensor | None, ctc: torch.Tensor | None) -> float | None:
        wanted = [
            log_probs.float().cpu()
            for log_probs, name in ((speller, "speller"), (ctc, "ctc"))
            if log_probs is not None and self.source in (name, "both")
        ]
        if not wanted:
            return None
        return float(confidences(torch.stack(wanted), torch.full((len(wanted),), token), self.measure).mean())


def word_confidence(characters: Sequence[float]) -> float:
    """Its least confident character's, rounded as written out: a threshold read off the output
    (`--min-confidence 0.1219`) keeps the word it was read from."""
    return round(min(characters), DIGITS)


def overall_confidence(words: Sequence[float | None]) -> float | None:
    known = [value for value in words if value is not None]
    return sum(known) / len(known) if known else None
