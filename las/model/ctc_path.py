"""The CTC head's forced alignment: the most probable path that spells a known transcript, and
the frames each character holds on it. Word times (las.recognition.timing) and the
pieces that long utterances are cut into in training (las.training.pieces) read it."""

from __future__ import annotations

import numpy as np
import torch

Span = tuple[int, int]  # [start, end) encoder frames


def ctc_frames_needed(tokens: list[int]) -> int:
    """Encoder frames a CTC alignment of `tokens` needs: one per character, and a blank between repeats."""
    return len(tokens) + sum(first == second for first, second in zip(tokens, tokens[1:], strict=False))


def viterbi_path(log_probs: torch.Tensor, tokens: list[int], blank: int) -> list[int]:
    """The symbol of each frame on the most probable CTC path that spells `tokens` (none `blank`),
    given `log_probs` `(frames, vocabulary)` on any device (`viterbi_paths` of one row)."""
    return viterbi_paths(log_probs[None], [len(log_probs)], [tokens], blank)[0]


def viterbi_paths(log_probs: torch.Tensor, lengths: list[int], tokens: list[list[int]], blank: int) -> list[list[int]]:
    """Each row's `viterbi_path`: `log_probs` `(batch, frames, vocabulary)` on any device, row
    `row`'s first `lengths[row]` frames spelling `tokens[row]` (`ctc_frames_needed` of them at
    least). States are the tokens interleaved with blanks, each entered from itself, the one
    before, or (a token after a different token) the token before, as torchaudio's `forced_align`
    computes it, in float32 with its tie-breaking (a state keeps its own path unless another is
    strictly better), so spans agree with it.

    A loop over frames in NumPy on the CPU, each frame one step over the whole batch: its cost is
    the loop's (about the same for one row as for eighty), where a loop per row cost a batch of
    long utterances its rows times that, and a GPU would launch a dozen small kernels per frame."""
    scores = log_probs.detach().float().cpu().numpy()  # (batch, frames, vocabulary)
    rows, frames = len(tokens), scores.shape[1]
    states = 2 * max((len(row) for row in tokens), default=0) + 1
    labels = np.full((rows, states), blank)
    for row, row_tokens in enumerate(tokens):
        labels[row, 1 : 2 * len(row_tokens) : 2] = row_tokens  # blank, t1, blank, t2, ..., blank
    # A token's state may skip the blank before it where the token before is another one.
    skips = np.zeros((rows, states), dtype=bool)
    skips[:, 3::2] = labels[:, 3::2] != labels[:, 1:-2:2]
    emissions = np.take_along_axis(scores, labels[:, None, :], axis=2)  # (batch, frames, states)
    best = np.full((rows, states), -np.inf, dtype=np.float32)
    best[:, :2] = emissions[:, 0, :2]
    ongoing = np.asarray(lengths)[:, None]  # a row's scores stop at its last frame
    none = np.full((rows, 2), -np.inf, dtype=np.float32)
    moves = np.zeros((rows, frames, states), dtype=np.int8)  # 0 stay, 1 from the state before, 2 skip
    for frame in range(1, frames):
        stay = best
        advance = np.concatenate((none[:, :1], best), axis=1)[:, :states]  # each state's one before
        skip = np.where(skips, np.concatenate((none, best), axis=1)[:, :states], -np.inf).astype(np.float32)
        move = np.where((skip > advance) & (skip > stay), 2, np.where((advance > stay) & (advance > skip), 1, 0))
        chosen = np.choose(move, (stay, advance, skip)) + emissions[:, frame]
        best = np.where(frame < ongoing, chosen, best)
        moves[:, frame] = move
    paths = []
    for row, row_tokens in enumerate(tokens):
        final = 2 * len(row_tokens)  # the state of the row's last blank
        state = final if not row_tokens or best[row, final] > best[row, final - 1] else final - 1
        path = [0] * lengths[row]
        for frame in range(lengths[row] - 1, -1, -1):
            path[frame] = int(labels[row, state])
            state -= int(moves[row, frame, state])
        paths.append(path)
    return paths


def runs(path: list[int], blank: int) -> list[Span]:
    """`[start, end)` frames of each run of one token in a CTC path, blanks left out."""
    spans: list[Span] = []
    for frame, symbol in enumerate(path):
        if symbol != blank and (frame == 0 or path[frame - 1] != symbol):
            spans.append((frame, frame + 1))
        elif symbol != blank:
            spans[-1] = (spans[-1][0], frame + 1)
    return spans
