"""`data.batch_memory`: the budget search against known memory curves, and what a run on a CPU
does with the setting (the probe itself runs on CUDA: tests/test_cuda.py)."""

import json
from dataclasses import replace

import pytest

from las.core.config import Config
from las.core.errors import LasError
from las.training.batch_memory import GIB, QUANTUM, largest_budget
from las.training.train import train


class Curve:
    """A step's peak memory: `fixed` bytes, `per_frame` bytes a frame, and `square` bytes a frame
    squared (the attention's energies grow faster than the frames); out of memory above
    `capacity`. Counts its probes."""

    def __init__(self, fixed: float, per_frame: float, square: float = 0.0, capacity: float = float("inf")) -> None:
        self.fixed, self.per_frame, self.square, self.capacity = fixed, per_frame, square, capacity
        self.probes: list[int] = []

    def __call__(self, frames: int) -> int | None:
        self.probes.append(frames)
        peak = self.fixed + self.per_frame * frames + self.square * frames**2
        return None if peak > self.capacity else int(peak)

    def largest(self, limit: int) -> int:
        """The largest multiple of QUANTUM whose peak is within `limit`, by brute force."""
        frames = QUANTUM
        while self.fixed + self.per_frame * (frames + QUANTUM) + self.square * (frames + QUANTUM) ** 2 <= limit:
            frames += QUANTUM
        return frames


def test_a_linear_curve_gives_the_largest_budget_within_the_limit_in_three_probes() -> None:
    curve = Curve(fixed=0.6 * GIB, per_frame=60_000)  # about what the scale recipe's bf16 step needs
    limit = 40 * GIB
    budget = largest_budget(curve, limit, smallest=2_500)
    assert budget == curve.largest(limit)
    assert budget % QUANTUM == 0 and len(curve.probes) == 3  # two for the line, one to check it


def test_a_curve_that_bends_up_is_checked_and_shrunk_until_a_step_fits() -> None:
    curve = Curve(fixed=0.5 * GIB, per_frame=20_000, square=0.02)
    limit = 20 * GIB
    budget = largest_budget(curve, limit, smallest=700)
    assert curve(budget) <= limit  # the line alone would have promised more than fits
    assert budget >= 0.95 * curve.largest(limit)


def test_a_second_probe_that_runs_out_of_memory_gives_a_line_from_a_smaller_one() -> None:
    curve = Curve(fixed=GIB, per_frame=100_000, capacity=2.2 * GIB)
    limit = 2 * GIB
    budget = largest_budget(curve, limit, smallest=4_000)
    assert curve.probes == [4_000, 16_000, 10_000]  # 16,000 frames ran out of memory: halfway back
    assert budget == curve.largest(limit)


def test_a_recipes_budget_is_kept_where_it_fits_and_lowered_where_it_does_not() -> None:
    curve = Curve(fixed=GIB, per_frame=100_000)
    assert largest_budget(curve, 8 * GIB, smallest=2_500, most=32_000) == 32_000
    assert curve.probes == [3_000, 32_000]
    lowered = largest_budget(Curve(fixed=GIB, per_frame=100_000), 2 * GIB, smallest=2_500, most=32_000)
    assert lowered == Curve(fixed=GIB, per_frame=100_000).largest(2 * GIB) < 32_000
    assert largest_budget(curve, 8 * GIB, smallest=2_500, most=2_000) == 2_000  # one utterance a batch


def test_a_budget_holds_the_longest_utterance_in_whole_thousands() -> None:
    curve = Curve(fixed=GIB, per_frame=1_000)
    assert largest_budget(curve, GIB + 8_500_000, smallest=6_300) == 8_000
    assert curve.probes[0] == 7_000


def test_a_share_that_holds_no_step_of_the_longest_utterances_is_refused_in_one_line() -> None:
    with pytest.raises(LasError, match=r"data.batch_memory.*does not hold a training step on 1000 frames.*3.00 GiB"):
        largest_budget(Curve(fixed=3 * GIB, per_frame=1), 2 * GIB, smallest=100)
    with pytest.raises(LasError, match=r"it needs more"):
        largest_budget(Curve(fixed=3 * GIB, per_frame=1, capacity=2.5 * GIB), 2 * GIB, smallest=100)


def test_on_a_cpu_the_batches_stay_as_configured_and_the_run_says_so(
    tiny_config: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    config = replace(tiny_config, data=replace(tiny_config.data, batch_memory=0.5))
    run = train(replace(config, train=replace(config.train, epochs=1)))
    assert "data.batch_memory: training on cpu" in capsys.readouterr().err
    assert json.loads((run / "config.json").read_text())["data"]["batch_frames"] == 0
