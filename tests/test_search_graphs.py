"""Beam, greedy and random search with each step a CUDA graph (`decode.cuda_graphs`), checked on the CPU: a stand-in
with a graph's buffer semantics gives the hypotheses of the plain search, and the step reads
nothing on the host and makes no shape from a value, which a capture would refuse or bake in.
tests/test_cuda.py runs the real graphs on a GPU."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree

from las.core.config import load_config
from las.core.errors import LasError
from las.core.text import Vocabulary
from las.search import build_strategy
from las.search.lexicon import Lexicon

from .conftest import TINY
from .test_search import (  # noqa: F401 (a fixture)
    assert_same_hypotheses,
    beam,
    greedy,
    language_model,
    model_and_memory,
    sampling,
)

HOST_READS = {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "nonzero", "masked_select", "tensor"}


def short_words(symbols: int) -> Lexicon:
    """Every word of one or two characters, of a vocabulary of this many `symbols`: a lexicon is
    of symbol ids, and every model here puts the space first among its characters, as sorting does."""
    stand_in = Vocabulary.from_texts([" " + "".join(chr(ord("a") + letter) for letter in range(symbols - 5))])
    letters = stand_in.symbols[5:]
    return Lexicon.of([first + second for first in letters for second in ("", *letters)], stand_in)


class NoHostReads(TorchFunctionMode):
    """Refuses what a CUDA graph cannot hold: a value read on the host (which waits for the
    device, and would be baked into the graph), a shape that depends on values, a tensor made
    from host data, an index by a list or a mask."""

    def __torch_function__(self, function: Callable, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        name = getattr(function, "__name__", "")
        if name in HOST_READS:
            raise AssertionError(f"a captured step would read the host: {name}")
        if name in ("__getitem__", "__setitem__"):
            index = args[1] if isinstance(args[1], tuple) else (args[1],)
            for part in index:
                if isinstance(part, list) or (isinstance(part, torch.Tensor) and part.dtype == torch.bool):
                    raise AssertionError(f"a captured step would index by a list or a mask: {name}")
        return function(*args, **(kwargs or {}))


class GraphOnTheCPU:
    """`CapturedStep`'s contract without CUDA: its own input buffers, loaded by copy on each call
    except where the input already is one; its own output buffers of fixed shapes, overwritten
    by each call (an output that is an input buffer stays that buffer); the step run under
    `NoHostReads`."""

    calls = 0

    def __init__(self, step: Callable[..., Any], generators: Sequence[torch.Generator] = ()) -> None:
        self.step = step  # its draws from `generators` run as they come, as a replay's do
        self.inputs: list[Any] | None = None
        self.outputs: Any = None

    def __call__(self, *inputs: Any) -> Any:
        GraphOnTheCPU.calls += 1
        leaves, structure = pytree.tree_flatten(inputs)
        if self.inputs is None:
            self.inputs = [leaf.clone() if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
        for mine, leaf in zip(self.inputs, leaves, strict=True):
            if isinstance(mine, torch.Tensor) and leaf is not mine:
                mine.copy_(leaf)
            elif not isinstance(mine, torch.Tensor):
                assert leaf == mine, "a constant of the step changed between calls"
        with NoHostReads():
            found = self.step(*pytree.tree_unflatten(self.inputs, structure))
        if self.outputs is None:
            self.outputs = pytree.tree_map(lambda leaf: leaf if self.is_input(leaf) else leaf.clone(), found)
        else:
            for mine, new in zip(pytree.tree_leaves(self.outputs), pytree.tree_leaves(found), strict=True):
                assert mine.shape == new.shape, "a graph's outputs keep their shapes"
                if not self.is_input(mine):
                    mine.copy_(new)
        return self.outputs

    def is_input(self, leaf: torch.Tensor) -> bool:
        return any(leaf is mine for mine in self.inputs or [])


@pytest.mark.parametrize("search", [beam, greedy, sampling])
@pytest.mark.parametrize("scorers", ["speller", "ctc", "ctc+lm", "window+threshold", "ctc+lexicon"])
def test_searches_as_cuda_graphs_find_the_plain_search_hypotheses(
    model_and_memory,  # noqa: F811
    search: Callable[..., Any],
    scorers: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, _, _, memory, symbols = model_and_memory
    settings: dict[str, Any] = {
        "speller": {},
        "ctc": {"ctc_weight": 0.3, "length_normalize": True},
        "ctc+lm": {"ctc_weight": 0.3, "language_model": language_model(model), "lm_weight": 0.2},
        "window+threshold": {"attention_window": 4, "eos_threshold": 1.5},
        "ctc+lexicon": {"ctc_weight": 0.3, "lexicon": short_words(model.speller.output.out_features)},
    }[scorers]
    expected = search(symbols, **settings).search(model, memory)
    for module in ("las.search.beam", "las.search.paths"):
        monkeypatch.setattr(f"{module}.CapturedStep", GraphOnTheCPU)
    monkeypatch.setattr("las.search.ctc_prefix.reads_are_free", lambda device: False)  # as on a GPU
    calls = GraphOnTheCPU.calls
    found = search(symbols, cuda_graphs=True, **settings).search(model, memory)
    assert GraphOnTheCPU.calls > calls
    assert_same_hypotheses(found, expected)


def test_the_host_read_guard_refuses_what_a_graph_cannot_hold() -> None:
    values = torch.arange(4.0)
    for read in (
        lambda: values.sum().item(),
        lambda: bool(values[0] > 1),
        lambda: values[values > 1],
        lambda: values[[0, 2]],
        lambda: torch.tensor([1.0]),
    ):
        with pytest.raises(AssertionError), NoHostReads():
            read()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (["decode.cuda_graphs=true", "decode.strategy=ctc"], "not decode.strategy=ctc"),
        (["decode.cuda_graphs=true"], "needs a CUDA device, decoding runs on cpu"),
    ],
)
def test_cuda_graphs_for_decoding_where_they_cannot_serve_are_refused(settings: list[str], message: str) -> None:
    from .test_model import VOCABULARY, make_model

    config = load_config(None, TINY + settings)
    with pytest.raises(LasError, match=message):
        build_strategy(config.decode, VOCABULARY, make_model())
    with pytest.raises(LasError, match="a transformer speller has none"):
        load_config(None, TINY + ["decode.cuda_graphs=true", "model.speller=transformer"])
