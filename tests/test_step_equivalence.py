"""The speller's speed-ups change no number: on a fixed batch, every attention variant gives the
loss and gradients (1e-5) that the plain per-step speller gave before it was fused (commit
9c42d79), with dropout and scheduled sampling drawing the same random numbers in the same order.

Rewrite the stored reference (only when a change of results is intended, and say why in the commit):
    python -m tests.test_step_equivalence
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import torch

REFERENCE = Path(__file__).resolve().parent / "data" / "step" / "reference.pt"
SMALL = {
    "listener_hidden": 12,
    "pyramid_layers": 1,
    "key_dim": 16,
    "value_dim": 16,
    "embedding_dim": 16,
    "speller_hidden": 32,
    "location_channels": 4,
    "location_kernel": 5,
    "ctc_weight": 0.3,
}
# model.* settings of each case beside SMALL, and the teacher-forcing rate of its step.
CASES: dict[str, tuple[dict[str, object], float]] = {
    "location": ({}, 1.0),
    "location_sampled": ({"speller_layers": 2, "tie_embedding": True}, 0.7),
    "location_heads": ({"attention_heads": 2, "cumulative_attention": False, "attention_temperature": 2.0}, 1.0),
    "additive": ({"attention": "additive"}, 1.0),
    "dot": ({"attention": "scaled_dot"}, 0.8),
    "gmm": ({"attention": "gmm"}, 1.0),
    "monotonic_chunk": ({"attention": "monotonic_chunk"}, 1.0),
}
VOCABULARY = 12
INPUT_SIZE = 8


def batch() -> dict[str, torch.Tensor]:
    """Four utterances of different lengths, padded, and their character targets."""
    generator = torch.Generator().manual_seed(3)
    feature_lengths = torch.tensor([37, 29, 21, 16])
    features = torch.randn(4, 37, INPUT_SIZE, generator=generator)
    target_lengths = torch.tensor([7, 6, 4, 3])  # with <eos>
    targets_in = torch.zeros(4, 7, dtype=torch.long)
    targets_out = torch.zeros(4, 7, dtype=torch.long)
    for row, length in enumerate(target_lengths.tolist()):
        characters = torch.randint(3, VOCABULARY, (length - 1,), generator=generator)
        targets_in[row, :length] = torch.cat([torch.tensor([1]), characters])  # <sos> then characters
        targets_out[row, :length] = torch.cat([characters, torch.tensor([2])])  # characters then <eos>
    return {
        "features": features,
        "feature_lengths": feature_lengths,
        "targets_in": targets_in,
        "targets_out": targets_out,
        "target_lengths": target_lengths,
    }


def loss_and_gradients(case: str, state: dict[str, torch.Tensor] | None) -> tuple[dict, float, dict]:
    """The model's state, the joint loss of `batch()` and every parameter's gradient."""
    from las.core.config import ModelConfig
    from las.model.las import LAS
    from las.model.losses import joint_loss

    settings, forcing = CASES[case]
    config = dataclasses.replace(ModelConfig(), **SMALL, **settings)
    torch.manual_seed(0)
    model = LAS.build(config, INPUT_SIZE, VOCABULARY)
    if state is not None:
        model.load_state_dict(state)
    model.train()
    data = batch()
    torch.manual_seed(1)  # dropout and scheduled sampling
    output = model(data["features"], data["feature_lengths"], data["targets_in"], forcing)
    loss, _ = joint_loss(
        output, data["targets_in"], data["targets_out"], data["target_lengths"], config.ctc_weight, 0.1
    )
    loss.backward()
    # GMM attention reads no keys: the key head has no gradient there.
    gradients = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return model.state_dict(), loss.item(), gradients


@pytest.fixture(scope="module")
def reference() -> dict:
    return torch.load(REFERENCE)


@pytest.mark.parametrize("case", sorted(CASES))
def test_loss_and_gradients_equal_the_plain_speller(case: str, reference: dict) -> None:
    expected = reference[case]
    _, loss, gradients = loss_and_gradients(case, expected["state"])
    assert loss == pytest.approx(expected["loss"], rel=1e-5)
    assert gradients.keys() == expected["gradients"].keys()
    for name, gradient in gradients.items():
        torch.testing.assert_close(gradient, expected["gradients"][name], rtol=1e-5, atol=1e-6, msg=name)


def write_reference() -> None:
    cases = {}
    for case in CASES:
        state, loss, gradients = loss_and_gradients(case, None)
        cases[case] = {"state": state, "loss": loss, "gradients": gradients}
    REFERENCE.parent.mkdir(parents=True, exist_ok=True)
    torch.save(cases, REFERENCE)
    print(f"wrote {REFERENCE}", file=sys.stderr)


if __name__ == "__main__":
    write_reference()
