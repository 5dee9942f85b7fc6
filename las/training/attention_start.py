"""How the attention starts: whether this run cuts its long utterances into pieces at the CTC
head's alignment (las.training.pieces) and how long they are at each step, and whether it guides
the attention by that alignment (las.model.guide) and how strongly.

Both are for training from scratch on long utterances, where attention does not find its place
by itself; `auto` turns each on by what the training data is (its median utterance length), not
by a flag a user must know of.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from las.core.config import Config
from las.model.guide import Guide, guide_weight
from las.training.pieces import Cutting


class AttentionStart:
    """The attention's start in a run: `cutting(step, start)` is how that training step cuts its
    utterances, `at(step, start)` its guide, each None where there is none. Both schedules count
    from `start`, the first step that had an alignment to use: until the CTC head has learnt there
    is none, and on long utterances that takes the head 500 steps or more."""

    def __init__(self, config: Config, frame_counts: Sequence[int]) -> None:
        settings = config.train
        self.steps = settings.attention_guide_steps
        self.width, self.trigger = settings.attention_guide_width, settings.attention_guide_trigger
        self.frames_per_second = frames_per_second = 1000 / config.features.hop_ms
        self.median_seconds = statistics.median(frame_counts) / frames_per_second if frame_counts else 0.0
        self.longest_frames = max(frame_counts, default=0)
        long = self.median_seconds >= settings.attention_guide_seconds and not settings.init
        if settings.attention_guide == "auto":
            self.on = long and config.model.guidable
        else:
            self.on = settings.attention_guide == "on"
        if settings.attention_pieces == "auto":
            self.pieces = long and config.model.ctc_weight > 0
        else:
            self.pieces = settings.attention_pieces == "on"
        self.first_piece_frames = round(settings.attention_pieces_seconds * frames_per_second)
        self.doubling_steps = settings.attention_pieces_doubling_steps

    def cutting(self, step: int, start: int | None) -> Cutting | None:
        """How training step `step` (from 0) cuts its utterances: pieces at most
        `train.attention_pieces_seconds` long from `start` on (and before it, once the head has
        learnt), twice as long every `attention_pieces_doubling_steps`; None once they are
        longer than every training utterance (or were never on)."""
        if not self.pieces:
            return None
        doublings = 0 if start is None else (step - start) / self.doubling_steps
        longest = round(self.first_piece_frames * 2**doublings)
        return Cutting(longest, self.trigger) if longest < self.longest_frames else None

    def at(self, step: int, start: int | None) -> Guide | None:
        """The guide of training step `step` (from 0), None once it has gone (or was never on);
        a schedule counted from step 0 was fading by the time the head had learnt."""
        if not self.on:
            return None
        weight = 1.0 if start is None else guide_weight(step - start, self.steps)
        return Guide(weight, self.width, self.trigger) if weight > 0 else None

    def active(self, step: int, start: int | None) -> bool:
        """Whether pieces or the guide are still to come or under way at `step`."""
        return self.cutting(step, start) is not None or self.at(step, start) is not None

    def describe(self) -> list[str]:
        """Lines for the log: what is on, and why."""
        why = f"the training utterances last {self.median_seconds:.1f} s at the median"
        lines = []
        if self.pieces:
            seconds = self.first_piece_frames / self.frames_per_second
            lines.append(
                f"utterances cut into pieces at the CTC head's alignment once it has learnt, at most "
                f"{seconds:.1f} s long, twice as long every {self.doubling_steps} steps (train.attention_pieces): {why}"
            )
        if self.on:
            lines.append(
                f"attention guided by the CTC head's alignment for {self.steps} steps once the head has learnt "
                f"(train.attention_guide): {why}"
            )
        return lines

    def advice(self) -> str:
        """What to do where the attention has not aligned (las.training.train's warning)."""
        if self.pieces:
            return (
                "Its utterances were cut into pieces at the CTC head's alignment: keep them short for longer "
                "(train.attention_pieces_doubling_steps), or train on short utterances first and start from "
                "that run with --init"
            )
        if self.on:
            return (
                f"The CTC head's alignment guided it for {self.steps} steps: guide it for longer "
                "(train.attention_guide_steps), or train on short utterances first and start from that run with --init"
            )
        return (
            "Attention aligns slowly on long utterances from scratch: cut them into pieces at the CTC head's "
            "alignment (train.attention_pieces=on, with model.ctc_weight > 0), or train on short utterances "
            "first and start from that run with --init (data/recipes/hw4p2.toml)"
        )
