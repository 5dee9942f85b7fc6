"""Training passes in shape buckets, each captured once on CUDA as a graph and replayed.

On a GPU a training step of AN4's small model launches thousands of small kernels: every output
character of the speller is a handful (an LSTM cell, the attention, the read-out), and cuDNN's
LSTM backward one matrix product and one element-wise kernel per frame and direction. The host
launching them, not the GPU, sets the pace (#28: 13% GPU busy on an H100). A CUDA graph launches
a whole captured sequence of kernels at once, but only for the shapes it was captured with. So
each batch is padded up to a bucket shape, and each bucket's forward and backward is captured
once (`torch.cuda.make_graphed_callables`) and replayed for every batch of that shape, as
NVIDIA's MLPerf RNN-T training captures its LSTMs per length bucket. The modules that use this
(las.model.graphed_speller, las.model.graphed_listener) pad so that no real output changes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable

import torch
from torch import nn

# Rungs of a length ladder grow by this much (each a multiple of QUANTUM): at most 25% padding
# per dimension, and about 17 rungs up to a 25 s utterance's 625 encoder frames.
RATIO = 1.25
QUANTUM = 8

Pass = Callable[..., tuple[torch.Tensor, ...]]


def bucket(size: int, ratio: float = RATIO, quantum: int = QUANTUM) -> int:
    """The smallest rung of the ladder `quantum`, then each rung `ratio` times the last rounded up
    to a multiple of `quantum`, that holds `size`."""
    rung = quantum
    while rung < size:
        rung = quantum * math.ceil(rung * ratio / quantum)
    return rung


def bucket_rows(rows: int, most_rows: int = 0) -> int:
    """The rows a batch of `rows` is padded to; never more than a batch can have (`most_rows`, 0
    for no bound): batches by count are all full but the last. A batch cut into more rows than
    that (long utterances in pieces, las.training.pieces) takes the ladder's rung."""
    rows_bucket = bucket(rows, quantum=1)
    return min(rows_bucket, most_rows) if most_rows >= rows else rows_bucket


class BucketedPasses:
    """A module's pass per bucket shape: with `capture` (CUDA) a CUDA graph, captured the first
    time its bucket comes; without, the module as it is (what the graph holds: the CPU tests)."""

    def __init__(self, make_pass: Callable[[], nn.Module], capture: bool) -> None:
        self.make_pass = make_pass
        self.capture = capture
        self.passes: dict[Hashable, Pass] = {}
        # One memory pool for every bucket's graphs of this module, not one each: a pool of its
        # own per bucket kept every bucket's activations, 65 GB on the scale corpus (an H100 ran
        # out). Sharing is safe because a bucket's tensors live only from its forward replay to
        # its backward replay and the step's use of its outputs, and no other bucket of the same
        # module replays in between. The speller's and the listener's graphs do interleave
        # within a step, so each module has its own pool.
        self.pool: tuple[int, int] | None = None

    def __len__(self) -> int:
        """How many bucket shapes have their pass (captured, on CUDA) so far."""
        return len(self.passes)

    def __call__(self, shape: Hashable, inputs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        if shape not in self.passes:
            self.passes[shape] = self.captured(inputs) if self.capture else self.make_pass()
        return self.passes[shape](*inputs)

    def captured(self, inputs: tuple[torch.Tensor, ...]) -> Pass:
        """The pass for the shape of `inputs`, captured with copies of them. Its warm-up passes
        draw random numbers; forking the generators puts them back, so that a run draws the same
        numbers whenever its graphs were captured (a resumed run captures anew)."""
        sample = tuple(item.detach().clone().requires_grad_(item.requires_grad) for item in inputs)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        with torch.random.fork_rng(devices=[inputs[0].device]):
            return torch.cuda.make_graphed_callables(self.make_pass(), sample, allow_unused_input=True, pool=self.pool)
