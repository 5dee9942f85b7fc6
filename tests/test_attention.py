import typing

import pytest
import torch

from las.core.config import AttentionName, load_config
from las.core.errors import LasError
from las.model.attention import MultiHeadAttention
from las.model.attention_registry import ATTENTIONS, build_attention


def inputs(batch: int = 3, frames: int = 6, dim: int = 8) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    lengths = torch.tensor([6, 4, 1])
    mask = torch.arange(frames) < lengths[:, None]
    previous = mask.float() / lengths[:, None]
    return dict(
        query=torch.randn(batch, dim),
        keys=torch.randn(batch, frames, dim),
        values=torch.randn(batch, frames, 5),
        mask=mask,
        previous_weights=previous,
    )


# Those that only move forward (las/model/monotonic.py, tests/test_monotonic.py) keep a state of
# their own, and monotonic attention's weights are a selection probability, not a distribution.
SOFT = sorted(name for name in ATTENTIONS if name not in ("gmm", "monotonic", "monotonic_chunk"))


@pytest.mark.parametrize("name", SOFT)
def test_weights_sum_to_one_and_are_zero_on_padding(name: str) -> None:
    attention = build_attention(name, 8, 5, location_channels=3, location_kernel=5)
    arguments = inputs()
    context, weights = attention(**arguments)
    assert context.shape == (3, 5) and weights.shape == (3, 6)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(3))
    assert torch.all(weights[~arguments["mask"]] == 0)
    # The context is the weighted sum of values.
    torch.testing.assert_close(context, torch.einsum("bt,btd->bd", weights, arguments["values"]))


@pytest.mark.parametrize("name", sorted(ATTENTIONS))
def test_gradient_reaches_every_parameter_and_input(name: str) -> None:
    attention = build_attention(name, 8, 5, location_channels=3, location_kernel=5)
    arguments = inputs()
    arguments["previous_weights"] = attention.initial_history(arguments["previous_weights"])
    arguments = {
        key: value.requires_grad_(True) if value.is_floating_point() else value for key, value in arguments.items()
    }
    context, _ = attention(**arguments)
    context.sum().backward()
    for parameter in attention.parameters():
        assert parameter.grad is not None and parameter.grad.abs().sum() > 0
    assert arguments["query"].grad.abs().sum() > 0
    assert name == "gmm" or arguments["keys"].grad.abs().sum() > 0  # GMM attention reads no keys


def test_location_aware_attention_reads_the_previous_weights() -> None:
    attention = build_attention("location", 8, 5, location_channels=3, location_kernel=5)
    arguments = inputs()
    _, uniform = attention(**arguments)
    shifted = torch.zeros_like(arguments["previous_weights"])
    shifted[:, 0] = 1.0
    _, peaked = attention(**{**arguments, "previous_weights": shifted})
    assert not torch.allclose(uniform[:2], peaked[:2])


def test_content_attention_ignores_the_previous_weights() -> None:
    attention = build_attention("dot", 8, 5, location_channels=3, location_kernel=5)
    arguments = inputs()
    _, first = attention(**arguments)
    _, second = attention(**{**arguments, "previous_weights": torch.rand(3, 6)})
    torch.testing.assert_close(first, second)


def test_the_config_names_exactly_the_registered_attentions() -> None:
    assert set(typing.get_args(AttentionName)) == set(ATTENTIONS)
    with pytest.raises(LasError, match="'model.attention': 'bogus' is not one of dot"):
        load_config(None, ["model.attention=bogus"])


def multi_head_inputs() -> dict[str, torch.Tensor]:
    arguments = inputs()
    arguments["values"] = torch.randn(3, 6, 8)  # divisible by the head counts below
    return arguments


@pytest.mark.parametrize("name", SOFT)
def test_multi_head_attention_masks_padding_and_one_head_is_the_single_head_variant(name: str) -> None:
    arguments = multi_head_inputs()
    torch.manual_seed(0)
    single = build_attention(name, 8, 8, heads=1, location_channels=3, location_kernel=5)
    torch.manual_seed(0)
    one_head = MultiHeadAttention(ATTENTIONS[name], 1, 8, location_channels=3, location_kernel=5)
    for expected, actual in zip(single(**arguments), one_head(**arguments), strict=True):
        torch.testing.assert_close(actual, expected)
    context, weights = build_attention(name, 8, 8, heads=4, location_channels=3, location_kernel=5)(**arguments)
    assert context.shape == (3, 8) and weights.shape == (3, 6)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(3))
    assert torch.all(weights[~arguments["mask"]] == 0)


def test_temperature_smooths_or_sharpens_the_weights() -> None:
    arguments = inputs()
    entropies = []
    for temperature in (0.5, 1.0, 2.0):
        torch.manual_seed(0)
        _, weights = build_attention("dot", 8, 5, temperature=temperature)(**arguments)
        entropies.append(-(weights[0] * weights[0].clamp_min(1e-12).log()).sum().item())
    assert entropies[0] < entropies[1] < entropies[2]


def test_bad_head_counts_and_temperatures_are_clear_errors() -> None:
    with pytest.raises(LasError, match="'model.attention_heads': 3 must divide model.key_dim=128"):
        load_config(None, ["model.attention_heads=3"])
    with pytest.raises(LasError, match="'model.attention_temperature': expected a number > 0, got 0.0"):
        load_config(None, ["model.attention_temperature=0"])
