"""When each character of a hypothesis was spoken, in encoder frames: by CTC forced alignment of
the decoded text where the model has a CTC head (the frames CTC itself would spend on each
character), else by the peak of the attention that emitted it."""

from __future__ import annotations

import torch
import torchaudio.functional

Span = tuple[int, int]  # [start, end) encoder frames


def token_spans(
    tokens: list[int],
    ctc_log_probs: torch.Tensor | None,  # (frames, vocabulary) of the utterance's valid frames
    attention: torch.Tensor | None,  # (tokens + 1, frames) weights per emitted symbol
    blank: int,
) -> tuple[list[Span], str]:
    """`[start, end)` encoder frames of each token, and how they were found: "ctc" or
    "attention" ("" for no tokens). CTC needs a frame per token and one between repeats; where the
    text is too long for its frames, the attention peaks serve."""
    if not tokens:
        return [], ""
    frames = ctc_log_probs.shape[0] if ctc_log_probs is not None else 0
    repeats = sum(first == second for first, second in zip(tokens, tokens[1:], strict=False))
    if ctc_log_probs is not None and frames >= len(tokens) + repeats:
        targets = torch.tensor([tokens], dtype=torch.int32, device=ctc_log_probs.device)
        path, scores = torchaudio.functional.forced_align(ctc_log_probs[None].float(), targets, blank=blank)
        merged = torchaudio.functional.merge_tokens(path[0].cpu(), scores[0].exp().cpu(), blank=blank)
        return [(span.start, span.end) for span in merged], "ctc"
    if attention is None:
        raise ValueError("token_spans needs CTC log-probabilities or attention weights")
    peaks = attention[: len(tokens)].argmax(dim=1).tolist()
    return [(peak, peak + 1) for peak in peaks], "attention"
