"""A weight that every step of a sequence multiplies, with its gradient taken once per sequence.

Autograd gives a weight used at every step a rank-`batch` gradient product per step, each added
into a buffer the size of the whole weight: for the speller's first cell that is a 1024 x 256
read-modify-write per character, the largest cost of its loop after the attention. Here each
step's backward only keeps its input and output gradient, and the weight's gradient is one
`(inputs, steps * batch) @ (steps * batch, outputs)` product when the sequence's backward pass
is done, the way cuDNN's RNNs do it.
"""

from __future__ import annotations

import torch


class SharedWeight:
    """`weight` `(inputs, outputs)` as the steps of one sequence multiply it (`addmm`)."""

    def __init__(self, weight: torch.Tensor) -> None:
        self.weight = weight
        self.deferred = weight.requires_grad and torch.is_grad_enabled()
        self.steps: list[tuple[torch.Tensor, torch.Tensor]] = []  # (input, output gradient) per step
        # Every step's product depends on `link`, so autograd runs _Collect's backward (the
        # weight's gradient) after all of theirs. The autograd contexts hold `steps`, not this
        # object: through `link` that would be a cycle, keeping the graph's nodes alive until
        # Python's collector runs (a CUDA graph's capture cannot use a parameter's older ones).
        self.link = _Collect.apply(weight, self.steps) if self.deferred else None

    def addmm(self, bias: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
        """`bias + inputs @ weight`: `(batch, outputs)` from `(batch, outputs)` and `(batch, inputs)`."""
        if not self.deferred:
            return torch.addmm(bias, inputs, self.weight)
        return _Step.apply(bias, inputs, self.weight, self.link, self.steps)


class _Collect(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight: torch.Tensor, steps: list) -> torch.Tensor:  # type: ignore[override]
        ctx.steps, ctx.dtype = steps, weight.dtype
        return weight.new_zeros(())

    @staticmethod
    def backward(ctx, _: torch.Tensor) -> tuple[torch.Tensor | None, None]:  # type: ignore[override]
        if not ctx.steps:
            return None, None
        inputs, gradients = (torch.cat(parts) for parts in zip(*ctx.steps, strict=True))
        ctx.steps.clear()
        # A sum over every step and utterance: in float32 even under fp16 autocast, where the
        # loss-scaled gradients of hundreds of steps could overflow in half precision.
        return (inputs.t().float() @ gradients.float()).to(ctx.dtype), None


class _Step(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx, bias: torch.Tensor, inputs: torch.Tensor, weight: torch.Tensor, link: torch.Tensor, steps: list
    ) -> torch.Tensor:
        ctx.save_for_backward(inputs, weight)
        ctx.steps = steps
        return torch.addmm(bias, inputs, weight)

    @staticmethod
    def backward(ctx, gradient: torch.Tensor) -> tuple:  # type: ignore[override]
        inputs, weight = ctx.saved_tensors
        ctx.steps.append((inputs, gradient))
        # Under autocast the product ran in lower precision: its gradient comes in that dtype.
        inputs_gradient = gradient @ weight.t().to(gradient.dtype) if ctx.needs_input_grad[1] else None
        return gradient, inputs_gradient, None, gradient.new_zeros(()), None
