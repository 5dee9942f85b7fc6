"""Attentions that only move forward: GMM location attention and (chunkwise) monotonic attention."""

import itertools

import pytest
import torch

from las.model.attention_registry import build_attention
from las.model.monotonic import MonotonicAttention, expected_alignment
from las.search import BeamSearch, GreedySearch, Rules, Symbols

from .test_attention import inputs
from .test_model import VOCABULARY, batch, make_model

FORWARD_ONLY = ["gmm", "monotonic", "monotonic_chunk"]


@pytest.mark.parametrize("softplus", [True, False])
def test_gmm_weights_sum_to_one_on_real_frames_and_the_means_never_go_back(softplus: bool) -> None:
    attention = build_attention("gmm", 8, 5, mixtures=3, softplus=softplus)
    arguments = inputs()
    mask, positions = arguments["mask"], attention.initial_history(arguments["previous_weights"])
    assert positions.shape == (3, 3) and torch.all(positions == 0)
    for step in range(6):
        torch.manual_seed(step)
        query = torch.randn(3, 8) * 3  # offsets of every size
        context, weights, after = attention.attend(query, arguments["keys"], arguments["values"], mask, positions)
        torch.testing.assert_close(weights.sum(dim=-1), torch.ones(3))
        assert torch.all(weights[~mask] == 0) and torch.isfinite(weights).all()
        torch.testing.assert_close(context, torch.einsum("bt,btd->bd", weights, arguments["values"]))
        assert torch.all(after > positions)  # strictly forward
        positions = after


def test_gmm_weights_peak_at_the_mixture_means() -> None:
    attention = build_attention("gmm", 8, 5, mixtures=1)
    arguments = inputs(batch=1, frames=40)
    arguments["mask"] = torch.ones(1, 40, dtype=torch.bool)
    with torch.no_grad():
        _, weights, position = attention.attend(
            torch.zeros(1, 8),
            arguments["keys"][:1],
            arguments["values"][:1],
            arguments["mask"],
            torch.full((1, 1), 20.0),
        )
    assert abs(int(weights.argmax()) - position.item()) <= 1


def test_the_expected_monotonic_alignment_equals_a_brute_force_enumeration() -> None:
    torch.manual_seed(0)
    steps, frames = 3, 4
    energies = torch.randn(steps, frames)
    probabilities = torch.sigmoid(energies).double()
    mask = torch.ones(1, frames, dtype=torch.bool)
    alignment = torch.zeros(1, frames)
    alignment[0, 0] = 1.0  # α_0: at the first frame
    expected = []
    for step in range(steps):
        alignment = expected_alignment(energies[step][None], alignment, mask)
        expected.append(alignment[0].double())
    enumerated = enumerate_alignments(probabilities)
    torch.testing.assert_close(torch.stack(expected), enumerated, rtol=1e-5, atol=1e-6)


def enumerate_alignments(probabilities: torch.Tensor) -> torch.Tensor:
    """α_i(j) = P(step i selects frame j) by enumerating every sequence of selected frames
    j_1 <= j_2 <= ... (a step scans from the frame selected last and selects frame j with
    probability p_i(j)); a prefix's probability counts once at each of its steps."""
    steps, frames = probabilities.shape
    alignments = torch.zeros(steps, frames, dtype=torch.float64)
    for length in range(1, steps + 1):
        for chosen in itertools.product(range(frames), repeat=length):
            if list(chosen) != sorted(chosen):
                continue
            probability, position = 1.0, 0
            for step, frame in enumerate(chosen):
                p = probabilities[step]
                probability *= float(torch.prod(1 - p[position:frame]) * p[frame])
                position = frame
            alignments[length - 1, chosen[-1]] += probability
    return alignments


def test_expected_alignment_is_zero_on_padding_and_stable_over_long_inputs() -> None:
    energies = torch.full((2, 3000), -6.0)  # p = 0.0025: products of (1 - p) underflow float32
    mask = torch.arange(3000)[None, :] < torch.tensor([[3000], [1000]])
    previous = torch.zeros(2, 3000)
    previous[:, 0] = 1.0
    alignment = expected_alignment(energies, previous, mask)
    assert torch.isfinite(alignment).all() and torch.all(alignment[~mask] == 0)
    geometric = torch.sigmoid(torch.tensor(-6.0)) * (1 - torch.sigmoid(torch.tensor(-6.0))) ** torch.arange(3000)
    torch.testing.assert_close(alignment[0], geometric, rtol=1e-4, atol=1e-12)


def test_mocha_spreads_each_selection_over_its_chunk_without_losing_mass() -> None:
    attention = build_attention("monotonic_chunk", 8, 5, chunk_size=3)
    arguments = inputs()
    history = attention.initial_history(arguments["previous_weights"])
    torch.manual_seed(0)
    _, weights, alignment = attention.attend(
        arguments["query"], arguments["keys"], arguments["values"], arguments["mask"], history
    )
    torch.testing.assert_close(weights.sum(dim=-1), alignment.sum(dim=-1))
    assert torch.all(weights[~arguments["mask"]] == 0)


@pytest.mark.parametrize("name", ["monotonic", "monotonic_chunk"])
def test_decoding_attends_left_to_right(name: str) -> None:
    model = make_model(name).eval()
    for layer in model.speller.attention.modules():
        if isinstance(layer, MonotonicAttention):
            layer.offset.data.fill_(0.5)  # an untrained model selects something at most steps
    features, lengths, _, _ = batch()
    [*results] = GreedySearch(Symbols.of(VOCABULARY), Rules(max_length_ratio=2.0)).search(
        model, model.listener(features, lengths)
    )
    selected_some = 0
    for (hypothesis,) in results:
        attended = [int(row.nonzero().max()) for row in hypothesis.attention if row.any()]
        selected_some += len(attended)
        assert attended == sorted(attended)
    assert selected_some > 5


@pytest.mark.parametrize("name", FORWARD_ONLY)
def test_beam_size_one_equals_greedy(name: str) -> None:
    model = make_model(name)
    features, lengths, _, _ = batch()
    memory = model.listener(features, lengths)
    symbols, rules = Symbols.of(VOCABULARY), Rules(length_normalize=False)
    greedy = GreedySearch(symbols, rules).search(model, memory)
    beamed = BeamSearch(symbols, rules, beam_size=1, nbest=1).search(model, memory)
    for (ours,), (theirs,) in zip(beamed, greedy, strict=True):
        assert ours.tokens == theirs.tokens and ours.score == pytest.approx(theirs.score, abs=1e-4)


@pytest.mark.parametrize("name", FORWARD_ONLY)
def test_a_model_with_it_learns(name: str) -> None:
    """A few steps on a fixed batch lower the loss: the gradient flows through the recurrences."""
    from las.model.losses import attention_loss

    model = make_model(name).train()
    features, lengths, targets_in, targets_out = batch()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(15):
        torch.manual_seed(0)  # the same selection noise every step
        loss = attention_loss(model(features, lengths, targets_in).logits, targets_out, 0.0)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]


def test_the_expected_alignment_has_a_finite_gradient_where_the_previous_one_underflowed() -> None:
    energy = torch.randn(2, 50, requires_grad=True)
    previous = torch.zeros(2, 50)
    previous[:, 10:] = torch.rand(2, 40)  # α underflowed to 0 on the first frames
    mask = torch.arange(50)[None, :] < torch.tensor([[50], [40]])
    expected_alignment(energy, previous, mask).sum().backward()
    assert torch.isfinite(energy.grad).all()
