"""A decoding step captured as one CUDA graph (`decode.cuda_graphs`).

On a GPU each step of a search is a few hundred small kernels (the speller's cells, the
attention, the CTC prefix score, the top-k), each launched from Python, and the GPU waits for
the host between them (#28). A CUDA graph replays a whole captured step with one launch, as
NeMo's transducer decoding does (Galvez et al. 2024). A graph holds fixed shapes and fixed
addresses, and no branch on a value: the step is captured once per batch, with copies of its
inputs; each later call copies the new inputs into those copies (an input that already is the
graph's own buffer, such as the listener's memory, is not copied) and replays it. The search
keeps its rows in place rather than dropping finished utterances, and reads nothing on the host
inside a step (`tests/test_search_graphs.py` checks both on the CPU). A step that draws random
numbers (random search) names its generator: the graph draws from it as PyTorch's graph-safe
generators do, each replay at the generator's offset then, as the eager step would.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

WARM_UP_CALLS = 2  # on a side stream before capture: cuBLAS and cuDNN choose their kernels


class CapturedStep:
    """`step(*inputs)` for pytrees (tuples, named tuples, lists) of tensors and constants, run as
    a CUDA graph captured on the first call. The outputs are the graph's own buffers: the next
    call overwrites them, so a caller that keeps one across calls clones it. `generators`: those
    the step draws from (the default CUDA generator needs no naming)."""

    def __init__(self, step: Callable[..., Any], generators: Sequence[torch.Generator] = ()) -> None:
        self.step = step
        self.generators = list(generators)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.inputs: list[Any] = []
        self.structure: pytree.TreeSpec | None = None
        self.outputs: Any = None

    def __call__(self, *inputs: Any) -> Any:
        leaves, structure = pytree.tree_flatten(inputs)
        if self.graph is None:
            self.capture(leaves, structure)
        elif structure != self.structure:
            raise RuntimeError(f"a captured decoding step was called with inputs of another structure: {structure}")
        self.load(leaves)
        assert self.graph is not None
        self.graph.replay()
        return self.outputs

    def load(self, leaves: list[Any]) -> None:
        """The graph's input buffers hold `leaves`; a constant must be the one it was captured with."""
        for mine, leaf in zip(self.inputs, leaves, strict=True):
            if isinstance(mine, torch.Tensor):
                if leaf is not mine:
                    mine.copy_(leaf)
            elif leaf != mine:
                raise RuntimeError(f"a captured decoding step's constant changed: {mine!r} -> {leaf!r}")

    def capture(self, leaves: list[Any], structure: pytree.TreeSpec) -> None:
        self.inputs = [leaf.clone() if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
        self.structure = structure
        inputs = pytree.tree_unflatten(self.inputs, structure)
        drawn_from = [generator.get_state() for generator in self.generators]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARM_UP_CALLS):
                self.step(*inputs)
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        for generator, state in zip(self.generators, drawn_from, strict=True):
            generator.set_state(state)  # the warm-up's draws are not the search's
            self.graph.register_generator_state(generator)
        with torch.cuda.graph(self.graph):
            self.outputs = self.step(*inputs)
        for generator, state in zip(self.generators, drawn_from, strict=True):
            generator.set_state(state)  # the first replay draws what the eager first step would


def cloned(outputs: Any) -> Any:
    """A copy of every tensor in `outputs` (a pytree) that the next replay cannot overwrite."""
    return pytree.tree_map(lambda leaf: leaf.clone() if isinstance(leaf, torch.Tensor) else leaf, outputs)
