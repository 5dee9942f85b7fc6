"""A weight shared by the steps of a sequence gets the gradient autograd would give it, in one product."""

from __future__ import annotations

import torch

from las.model.recurrence import SharedWeight


def recurrence(weight: torch.Tensor, bias: torch.Tensor, start: torch.Tensor, shared: bool) -> torch.Tensor:
    """Five steps of h = tanh(bias + h @ weight), with the weight shared or multiplied plainly."""
    sharing = SharedWeight(weight)
    hidden = start
    for _ in range(5):
        hidden = torch.tanh(sharing.addmm(bias, hidden) if shared else torch.addmm(bias, hidden, weight))
    return hidden


def gradients(shared: bool, autocast: bool = False) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    weight, bias, start = (torch.randn(*shape, generator=generator) for shape in [(6, 6), (3, 6), (3, 6)])
    for tensor in (weight, bias, start):
        tensor.requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        hidden = recurrence(weight * 0.5, bias, start, shared)  # a view of the parameter, as the speller's
    (hidden.float() ** 2).sum().backward()
    return [weight.grad, bias.grad, start.grad]


def test_gradients_equal_autograd_per_step_products() -> None:
    for found, expected in zip(gradients(shared=True), gradients(shared=False), strict=True):
        torch.testing.assert_close(found, expected, rtol=1e-5, atol=1e-6)


def test_gradients_under_bfloat16_autocast_are_float32_and_match() -> None:
    found, expected = gradients(shared=True, autocast=True), gradients(shared=False, autocast=True)
    for tensor, reference in zip(found, expected, strict=True):
        assert tensor.dtype == torch.float32
        torch.testing.assert_close(tensor, reference, rtol=2e-2, atol=2e-2)


def test_without_gradients_it_is_a_plain_product() -> None:
    weight = torch.randn(4, 4, requires_grad=True)
    with torch.no_grad():
        sharing = SharedWeight(weight)
        result = sharing.addmm(torch.zeros(2, 4), torch.ones(2, 4))
    assert sharing.link is None and not result.requires_grad
    torch.testing.assert_close(result, weight.detach().sum(dim=0).expand(2, 4))


def test_a_second_sequence_starts_afresh() -> None:
    """Each forward pass has its own shared weight: two backward passes give twice one's gradient."""
    weight = torch.randn(4, 4, requires_grad=True)
    for _ in range(2):
        recurrence(weight, torch.zeros(2, 4), torch.ones(2, 4), shared=True).sum().backward()
    twice = weight.grad.clone()
    weight.grad = None
    recurrence(weight, torch.zeros(2, 4), torch.ones(2, 4), shared=True).sum().backward()
    torch.testing.assert_close(twice, 2 * weight.grad)


def test_the_gradient_sum_stays_finite_where_half_precision_would_overflow() -> None:
    """300 steps whose products ran in float16, each adding 300 to every weight gradient: 90,000
    is past float16's largest value (65,504), not past float32's."""
    weight = torch.zeros(4, 4, requires_grad=True)
    sharing = SharedWeight(weight)
    ones = torch.ones(1, 4)
    with torch.autocast("cpu", dtype=torch.float16):
        outputs = [sharing.addmm(torch.zeros(1, 4), ones) for _ in range(300)]
    (300 * torch.stack(outputs).float().sum()).backward()
    torch.testing.assert_close(weight.grad, torch.full((4, 4), 90_000.0))


def test_a_sequence_leaves_no_reference_cycle_for_the_collector() -> None:
    """Its graph is freed when the last reference goes, not at Python's next collection: a graph
    kept alive holds the weight's gradient node, and a CUDA graph capture cannot use one made on
    another stream (`make_graphed_callables` after an eager step failed so on a GPU)."""
    import gc

    gradients(shared=True)  # imports and first-use caches out of the way
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gradients(shared=True)
        assert gc.collect() == 0, [type(item).__name__ for item in gc.garbage][:10]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
