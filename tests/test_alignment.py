import torch

from las.model.alignment import Alignment, diagonal_rows


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


def test_a_teacher_forced_batch_is_judged_row_by_row_as_one_decoded_utterance() -> None:
    diagonal = torch.eye(6).repeat_interleave(2, dim=1)  # 6 characters over 12 frames
    stuck = torch.zeros(6, 12)
    stuck[:, 3] = 1
    back_at_eos = torch.cat([diagonal[:4], torch.eye(1, 12), torch.zeros(1, 12)])  # 4 characters, <eos>, padding
    short_recording = torch.eye(6, 12)  # peaks 0-5 of 12 frames...
    attention = torch.stack([diagonal, stuck, back_at_eos, short_recording])  # (batch, steps, frames)
    characters = torch.tensor([6, 6, 4, 6])
    encoder_lengths = torch.tensor([12, 12, 12, 6])  # ...the last row's 6 frames: all of them
    rows = diagonal_rows(attention, characters, encoder_lengths)
    assert rows.tolist() == [True, False, True, True]
    for row, judged in enumerate(rows.tolist()):
        weights = attention[row, : characters[row] + 1, : encoder_lengths[row]]
        assert Alignment.of_decoding(weights).diagonal == judged
    assert diagonal_rows(attention[:1, :1], torch.tensor([1]), torch.tensor([12])).tolist() == [False]  # one character
