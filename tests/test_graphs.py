"""The speller's and the listener's passes in shape buckets (las.model.graphs) change no number:
padded to their buckets and cut back, every attention variant and pyramid gives the unpadded
pass's loss and gradients.
This is what a CUDA graph replays; the capture itself is tested on a GPU (tests/test_cuda.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from las.core.config import Config, ModelConfig, load_config
from las.core.errors import LasError
from las.model.graphed_listener import GraphedListener
from las.model.graphed_speller import GraphedSpeller, bucket_shape, padded
from las.model.graphs import bucket
from las.model.las import LAS
from las.model.losses import joint_loss
from tests.test_step_equivalence import CASES, INPUT_SIZE, SMALL, VOCABULARY, batch

# model.* settings beside SMALL for a Transformer speller.
TRANSFORMER_SPELLER = {"speller": "transformer", "transformer_dim": 16, "transformer_feedforward": 32}


def test_buckets_hold_their_size_in_a_short_ladder() -> None:
    sizes = range(1, 700)
    rungs = {bucket(size) for size in sizes}
    assert all(size <= bucket(size) < size * 1.25 + 8 for size in sizes)  # a quarter more at most, or a quantum
    assert all(rung % 8 == 0 for rung in rungs) and len(rungs) <= 20
    assert [bucket(size) for size in sizes] == sorted(bucket(size) for size in sizes)
    assert [bucket_shape(rows, 30, 17)[0] for rows in (1, 2, 3, 6, 16, 17)] == [1, 2, 3, 7, 19, 19]
    assert [bucket_shape(rows, 30, 17, most_rows=16)[0] for rows in (6, 13, 16)] == [7, 15, 16]  # a full batch
    # A batch in pieces has more rows than a batch by count has: padded up, never cut down.
    assert [bucket_shape(rows, 30, 17, most_rows=16)[0] for rows in (17, 40)] == [19, 48]


def test_padding_rows_attend_to_one_frame_and_real_rows_keep_their_mask() -> None:
    from las.model.listener import ListenerOutput

    mask = torch.tensor([[True, True, False], [True, False, False]])
    memory = ListenerOutput(torch.randn(2, 3, 4), torch.randn(2, 3, 5), mask, torch.tensor([2, 1]), torch.empty(0))
    keys, values, padded_mask, lengths, targets = padded(memory, torch.ones(2, 4, dtype=torch.long), (4, 8, 8))
    assert keys.shape == (4, 8, 4) and values.shape == (4, 8, 5) and targets.shape == (4, 8)
    assert torch.equal(padded_mask[:2, :3], mask) and not padded_mask[:2, 3:].any()
    assert padded_mask[2:].sum(dim=1).tolist() == [1, 1] and lengths.tolist() == [2, 1, 1, 1]
    assert not targets[:, 4:].any() and not targets[2:].any()


@pytest.mark.parametrize("forcing", [1.0, 0.0])  # given characters; every one the model's own (no coin decides)
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_bucketed_pass_gives_the_loss_and_gradients_of_the_plain_one(case: str, forcing: float) -> None:
    assert_bucketed_pass_is_the_plain_one(case, forcing, torch.device("cpu"), capture=False)


@pytest.mark.parametrize("pyramid_layers", [1, 2, 3])
@pytest.mark.parametrize("rows", [(4,), (6,)])  # a full bucket of rows; 6 padded to 7
def test_the_bucketed_listener_gives_the_loss_and_gradients_of_the_plain_one(
    pyramid_layers: int, rows: tuple[int, ...]
) -> None:
    settings = {"pyramid_layers": pyramid_layers}
    assert_bucketed_pass_is_the_plain_one("location", 1.0, torch.device("cpu"), False, ("listener",), rows, settings)


def test_the_bucketed_listener_under_a_transformer_speller_gives_the_loss_and_gradients_of_the_plain_one() -> None:
    # train.cuda_graphs graphs the pyramid alone there: the speller spells in one pass.
    assert_bucketed_pass_is_the_plain_one(
        "location", 1.0, torch.device("cpu"), False, ("listener",), (4, 6), TRANSFORMER_SPELLER
    )


def assert_bucketed_pass_is_the_plain_one(
    case: str,
    forcing: float,
    device: torch.device,
    capture: bool,
    parts: tuple[str, ...] = ("speller", "listener"),
    rows: tuple[int, ...] = (4,),
    settings: dict[str, object] | None = None,
) -> None:
    """The loss, attention and every gradient of a step on each of `rows` rows of `batch()` in
    turn, through the plain model and with its `parts` in buckets (`GraphedSpeller`,
    `GraphedListener`), twice round: each captured graph's first pass and its replay after the
    other buckets' (which share its memory pool)."""
    config = dataclasses.replace(ModelConfig(), **(SMALL | CASES[case][0] | (settings or {})))
    torch.manual_seed(0)
    # Without the draws of dropout and monotonic attention's noise, whose shapes are the padded
    # ones: the same numbers in another order. Gradients flow all the same.
    model = LAS.build(config, INPUT_SIZE, VOCABULARY).to(device).eval()
    for module in model.modules():  # cuDNN's LSTM backward runs only in training mode; these draw nothing
        if isinstance(module, nn.RNNBase):
            assert module.dropout == 0
            module.train()
    doubled = {name: torch.cat([tensor, tensor]).to(device) for name, tensor in batch().items()}
    spell = GraphedSpeller(model.speller, capture=capture) if "speller" in parts else None
    listen = GraphedListener(model.listener, capture=capture) if "listener" in parts else None

    def step(graphed: bool, data: dict[str, torch.Tensor]) -> tuple[float, torch.Tensor, dict[str, torch.Tensor]]:
        # In a function of its own, so that a pass's autograd graph is gone before the next one
        # captures: a graph kept alive holds the parameters' gradient nodes on the default stream,
        # where a capture's backward cannot use them (training drops it between steps likewise).
        model.zero_grad(set_to_none=True)
        passes = (spell, listen) if graphed else (None, None)
        output = model(data["features"], data["feature_lengths"], data["targets_in"], forcing, *passes)
        assert output.logits.shape == (*data["targets_in"].shape, VOCABULARY)
        loss, _ = joint_loss(output, data["targets_in"], data["targets_out"], data["target_lengths"], 0.3, 0.1)
        loss.backward()
        gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
        return loss.item(), output.attention.detach().clone(), gradients

    for size in rows * 2:
        data = {name: tensor[:size] for name, tensor in doubled.items()}
        loss, attention, gradients = step(False, data)
        bucketed_loss, bucketed_attention, bucketed_gradients = step(True, data)
        assert bucketed_loss == pytest.approx(loss, rel=1e-5)
        torch.testing.assert_close(bucketed_attention, attention)
        assert bucketed_gradients.keys() == gradients.keys()
        for name, gradient in gradients.items():
            torch.testing.assert_close(bucketed_gradients[name], gradient, rtol=1e-4, atol=1e-6, msg=name)
    # One pass per bucket shape, made the first time it came and replayed after (captured_graphs).
    for passes in (spell, listen):
        assert passes is None or len(passes.passes) == len(set(rows))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["train.cuda_graphs=true", "train.compile=true"], "choose one way to speed up the speller"),
        (["train.cuda_graphs=true", "train.device=cpu"], "needs a CUDA device"),
        (
            ["train.cuda_graphs=true", "model.speller=transformer", "model.listener=conformer"],
            "a conformer listener with a transformer speller has neither",
        ),
    ],
)
def test_cuda_graphs_with_settings_they_cannot_serve_are_refused(settings: list[str], message: str) -> None:
    with pytest.raises(LasError, match=message):
        load_config(None, settings)


@pytest.mark.parametrize(
    "settings",
    [["model.speller=transformer"], ["model.listener=conformer"], ["model.listener=transformer"]],
)
def test_cuda_graphs_take_whichever_of_the_speller_and_listener_they_can(settings: list[str]) -> None:
    config = load_config(None, ["train.cuda_graphs=true", *settings])
    assert config.train.cuda_graphs


def test_cuda_graphs_without_a_gpu_stop_training_with_one_line(tiny_config: Config) -> None:
    from las.training.train import train

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: tests/test_cuda.py trains with graphs")
    settings = dataclasses.replace(tiny_config.train, device="auto", cuda_graphs=True)
    config = dataclasses.replace(tiny_config, train=settings)
    with pytest.raises(LasError, match="needs a CUDA device, training runs on cpu"):
        train(config)
