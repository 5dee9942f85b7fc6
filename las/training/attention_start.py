"""How the attention starts: whether this run guides it by the CTC head's alignment
(las.model.guide), and how strongly at each step.

The guide is for training from scratch on long utterances, where attention does not find its
place by itself; `train.attention_guide=auto` turns it on by what the training data is (its
median utterance length), not by a flag a user must know of.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from las.core.config import Config
from las.model.guide import Guide, guide_weight


class AttentionStart:
    """The attention guide of a run: `at(step)` is the guide of that training step, or None."""

    def __init__(self, config: Config, frame_counts: Sequence[int]) -> None:
        settings = config.train
        self.steps = settings.attention_guide_steps
        self.width, self.trigger = settings.attention_guide_width, settings.attention_guide_trigger
        self.median_seconds = statistics.median(frame_counts) * config.features.hop_ms / 1000 if frame_counts else 0.0
        if settings.attention_guide == "auto":
            long = self.median_seconds >= settings.attention_guide_seconds
            self.on = long and not settings.init and config.model.guidable
        else:
            self.on = settings.attention_guide == "on"

    def at(self, step: int, start: int | None) -> Guide | None:
        """The guide of training step `step` (from 0), None once it has gone (or was never on).
        Its schedule counts from `start`, the step it first had an alignment to teach: until the
        CTC head has learnt there is none, and on long utterances that takes the head 500 steps
        or more (a schedule counted from step 0 was fading by then)."""
        if not self.on:
            return None
        weight = 1.0 if start is None else guide_weight(step - start, self.steps)
        return Guide(weight, self.width, self.trigger) if weight > 0 else None

    def active(self, step: int, start: int | None) -> bool:
        """Whether the guide is still to come or under way at `step`."""
        return self.at(step, start) is not None

    def describe(self) -> str:
        """One line for the log: why the guide is on."""
        return (
            f"attention guided by the CTC head's alignment for {self.steps} steps once the head has learnt "
            f"(train.attention_guide): the training utterances last {self.median_seconds:.1f} s at the median"
        )

    def advice(self) -> str:
        """What to do where the attention has not aligned (las.training.train's warning)."""
        if self.on:
            return (
                f"The CTC head's alignment guided it for {self.steps} steps: guide it for longer "
                "(train.attention_guide_steps), or train on short utterances first and start from that run with --init"
            )
        return (
            "Attention aligns slowly on long utterances from scratch: guide it by the CTC head's alignment "
            "(train.attention_guide=on, with model.ctc_weight > 0), or train on short utterances first and "
            "start from that run with --init (data/recipes/hw4p2.toml)"
        )
