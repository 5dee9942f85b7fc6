"""The CTC head's forced alignment: the most probable path that spells a known transcript, and
the frames each character holds on it. Word times (las.recognition.timing) and the attention's
guide in training (las.model.guide) read it."""

from __future__ import annotations

import numpy as np
import torch

Span = tuple[int, int]  # [start, end) encoder frames


def ctc_frames_needed(tokens: list[int]) -> int:
    """Encoder frames a CTC alignment of `tokens` needs: one per character, and a blank between repeats."""
    return len(tokens) + sum(first == second for first, second in zip(tokens, tokens[1:], strict=False))


def viterbi_path(log_probs: torch.Tensor, tokens: list[int], blank: int) -> list[int]:
    """The symbol of each frame on the most probable CTC path that spells `tokens` (none `blank`),
    given `log_probs` `(frames, vocabulary)` on any device: `tokens` interleaved with blanks,
    each state entered from itself, the one before, or (a token after a different token) the
    token before, as torchaudio's `forced_align` computes it, in float32 with its tie-breaking
    (a state keeps its own path unless another is strictly better), so spans agree with it.

    A loop over frames in NumPy on the CPU: one small step per frame, which a GPU would launch
    as kernels one after another."""
    scores = log_probs.detach().float().cpu().numpy()  # (frames, vocabulary)
    labels = np.full(2 * len(tokens) + 1, blank)
    labels[1::2] = tokens  # (states,): blank, t1, blank, t2, ..., blank
    states = len(labels)
    # A token's state may skip the blank before it where the token before is another one.
    skips = np.zeros(states, dtype=bool)
    skips[3::2] = labels[3::2] != labels[1:-2:2]
    emissions = scores[:, labels]  # (frames, states)
    best = np.full(states, -np.inf, dtype=np.float32)
    best[:2] = emissions[0, :2]
    moves = np.zeros((len(scores), states), dtype=np.int8)  # 0 stay, 1 from the state before, 2 skip
    for frame in range(1, len(scores)):
        stay = best
        advance = np.concatenate(([-np.inf], best[:-1])).astype(np.float32)
        skip = np.where(skips, np.concatenate(([-np.inf, -np.inf], best[:-2])), -np.inf).astype(np.float32)
        move = np.where((skip > advance) & (skip > stay), 2, np.where((advance > stay) & (advance > skip), 1, 0))
        best = np.choose(move, (stay, advance, skip)) + emissions[frame]
        moves[frame] = move
    state = states - 1 if best[-1] > best[-2] else states - 2
    path = [0] * len(scores)
    for frame in range(len(scores) - 1, -1, -1):
        path[frame] = int(labels[state])
        state -= int(moves[frame, state])
    return path


def runs(path: list[int], blank: int) -> list[Span]:
    """`[start, end)` frames of each run of one token in a CTC path, blanks left out."""
    spans: list[Span] = []
    for frame, symbol in enumerate(path):
        if symbol != blank and (frame == 0 or path[frame - 1] != symbol):
            spans.append((frame, frame + 1))
        elif symbol != blank:
            spans[-1] = (spans[-1][0], frame + 1)
    return spans
