import pytest
import torch

from las.model.listener import BidirectionalLSTM, Listener, LockedDropout, halve_lengths, reverse_within_lengths


def make_listener(pyramid_layers: int = 3) -> Listener:
    torch.manual_seed(0)
    return Listener(
        input_size=5, hidden_size=6, pyramid_layers=pyramid_layers, key_dim=4, value_dim=3, dropout=0.0
    ).eval()


def test_reverse_within_lengths_keeps_padding_in_place() -> None:
    x = torch.arange(8.0).reshape(2, 4, 1)
    reversed_x = reverse_within_lengths(x, torch.tensor([4, 2]))
    assert reversed_x[:, :, 0].tolist() == [[3.0, 2.0, 1.0, 0.0], [5.0, 4.0, 6.0, 7.0]]


@pytest.mark.parametrize("frames", [1, 7, 8, 9, 15, 16, 17])
def test_lengths_and_mask_after_each_pyramid_layer(frames: int) -> None:
    # Each layer pairs frames; an odd last frame is paired with a zero frame: ceil(length / 2).
    expected = frames
    for layers in range(4):
        output = make_listener(layers)(torch.randn(1, frames, 5), torch.tensor([frames]))
        assert output.lengths.tolist() == [expected]
        assert output.keys.shape == (1, expected, 4) and output.values.shape == (1, expected, 3)
        assert output.mask.tolist() == [[True] * expected]
        expected = (expected + 1) // 2


def test_batch_lengths_mask_and_zero_padding() -> None:
    lengths = torch.tensor([17, 9, 8, 1])
    output = make_listener(3)(torch.randn(4, 17, 5), lengths)
    expected = lengths
    for _ in range(3):
        expected = halve_lengths(expected)
    assert expected.tolist() == [3, 2, 1, 1]
    assert output.lengths.tolist() == expected.tolist()
    assert output.mask.tolist() == [[True, True, True], [True, True, False], [True, False, False], [True, False, False]]
    assert torch.all(output.hidden[~output.mask] == 0)


def test_padding_does_not_change_an_utterance() -> None:
    listener = make_listener(3)
    features = torch.randn(3, 21, 5)
    lengths = torch.tensor([21, 13, 6])
    batched = listener(features, lengths)
    for row, length in enumerate(lengths.tolist()):
        alone = listener(features[row : row + 1, :length], lengths[row : row + 1])
        valid = alone.lengths.item()
        torch.testing.assert_close(batched.keys[row, :valid], alone.keys[0], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(batched.values[row, :valid], alone.values[0], rtol=1e-5, atol=1e-6)


def test_padded_path_equals_packed_path_with_gradients() -> None:
    """The CPU fast path (padded, reversed within lengths) is exact: same outputs and gradients."""
    torch.manual_seed(0)
    layer = BidirectionalLSTM(5, 7)
    features = torch.randn(3, 11, 5)
    lengths = torch.tensor([11, 4, 7])
    results = []
    for packed in (True, False):
        layer.zero_grad()
        inputs = features.clone().requires_grad_(True)
        layer.packed = packed
        output = layer(inputs, lengths)
        (output * torch.linspace(-1, 1, output.numel()).reshape(output.shape)).sum().backward()
        results.append((output.detach(), inputs.grad.clone(), [p.grad.clone() for p in layer.parameters()]))
    (packed_out, packed_input_grad, packed_grads), (padded_out, padded_input_grad, padded_grads) = results
    torch.testing.assert_close(padded_out, packed_out)
    torch.testing.assert_close(padded_input_grad, packed_input_grad)
    for padded, packed in zip(padded_grads, packed_grads, strict=True):
        torch.testing.assert_close(padded, packed)


def test_locked_dropout_shares_one_mask_across_frames() -> None:
    torch.manual_seed(0)
    dropout = LockedDropout(0.5).train()
    output = dropout(torch.ones(4, 30, 16))
    dropped = output == 0  # (batch, frames, features)
    assert torch.all(dropped == dropped[:, :1, :])  # the same units dropped at every frame
    assert 0 < dropped[:, 0].float().mean() < 1
    torch.testing.assert_close(output[~dropped], torch.full_like(output[~dropped], 2.0))  # rescaled by 1/(1-p)
    assert torch.equal(dropout.eval()(torch.ones(2, 3, 4)), torch.ones(2, 3, 4))


def test_listener_with_locked_dropout_keeps_lengths_and_padding() -> None:
    torch.manual_seed(0)
    listener = Listener(5, 6, 2, 4, 3, dropout=0.3, locked_dropout=True).train()
    output = listener(torch.randn(2, 9, 5), torch.tensor([9, 5]))
    assert output.lengths.tolist() == [3, 2]
    assert torch.all(output.hidden[~output.mask] == 0)


@pytest.mark.parametrize("frames", [1, 6, 7, 8, 9, 23])
def test_stacked_input_frames_shorten_the_time_axis_before_the_pyramid(frames: int) -> None:
    """`stacking` frames side by side make one frame of the first BLSTM, a last group short of
    frames filled with zeros: the encoder frames are ceil(frames / (stacking x 2**layers)), as
    `reduced` counts them, and an utterance reads the same padded in a batch as alone."""
    torch.manual_seed(0)
    listener = Listener(5, 6, 1, 4, 3, 0.0, stacking=3).eval()
    assert listener.reduction == 6 and listener.input_layer.forward_lstm.input_size == 15
    features = torch.randn(2, frames + 4, 5)
    lengths = torch.tensor([frames + 4, frames])
    output = listener(features, lengths)
    expected = [-(-(frames + 4) // 6), -(-frames // 6)]
    assert output.lengths.tolist() == expected == listener.reduced(lengths).tolist()
    assert listener.reduced(frames) == expected[1]
    assert output.mask.sum(dim=1).tolist() == expected and torch.all(output.hidden[~output.mask] == 0)
    alone = listener(features[1:, :frames], lengths[1:])
    torch.testing.assert_close(output.keys[1, : expected[1]], alone.keys[0], rtol=1e-5, atol=1e-6)


def test_stacking_places_consecutive_frames_side_by_side() -> None:
    from las.model.listener import stack_frames

    x = torch.arange(10.0).reshape(1, 5, 2)  # frames [0 1], [2 3], ..., [8 9]
    assert stack_frames(x, 2).tolist() == [[[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 0]]]
    assert torch.equal(stack_frames(x, 1), x)
