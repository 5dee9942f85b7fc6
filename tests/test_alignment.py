import torch

from las.model.alignment import Alignment


def test_a_diagonal_map_is_diagonal() -> None:
    alignment = Alignment.of(torch.eye(6).repeat_interleave(2, dim=1))  # peaks 0, 2, ..., 10 of 12
    assert alignment == Alignment(1.0, 0.917) and alignment.diagonal


def test_stuck_or_backward_attention_is_not_diagonal() -> None:
    stuck = torch.zeros(8, 20)
    stuck[:, 3] = 1
    assert Alignment.of(stuck) == Alignment(1.0, 0.05) and not Alignment.of(stuck).diagonal
    backward = torch.eye(8).flip(0)
    assert Alignment.of(backward) == Alignment(0.0, 0.0) and not Alignment.of(backward).diagonal


def test_one_step_back_in_ten_is_still_diagonal() -> None:
    peaks = [0, 1, 2, 3, 2, 5, 6, 7, 8, 9, 10]
    weights = torch.nn.functional.one_hot(torch.tensor(peaks), 11).float()
    alignment = Alignment.of(weights)
    assert alignment.monotonic == 0.9 and alignment.coverage == 1.0 and alignment.diagonal


def test_the_end_of_sentence_step_does_not_count() -> None:
    # A diagonal map whose <eos> row looks back at the start, as cumulative attention does.
    weights = torch.cat([torch.eye(6).repeat_interleave(2, dim=1), torch.eye(1, 12)])
    assert not Alignment.of(weights).diagonal
    assert Alignment.of_decoding(weights) == Alignment(1.0, 0.917) and Alignment.of_decoding(weights).diagonal


def test_steps_that_attend_to_nothing_have_no_peak() -> None:
    weights = torch.eye(4)[[0, 1, 2, 3]]
    with_empty_steps = torch.cat([weights[:2], torch.zeros(2, 4), weights[2:]])
    assert Alignment.of(with_empty_steps) == Alignment.of(weights)
    assert Alignment.of(with_empty_steps).diagonal
