"""The package layers of las/: every import goes to its own layer or one below, and no modules
import each other in a circle. docs/layout.md shows the layers as this code finds them
(`python -m tests.test_layers` writes the picture there)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYOUT = ROOT / "docs" / "layout.md"
# Bottom to top: each package may import its own modules and those of the packages before it.
LAYERS = ["las.core", "las.data", "las.model", "las.search", "las.export", "las.recognition", "las.training", "las"]
BEGIN, END = "<!-- layers: begin (python -m tests.test_layers) -->", "<!-- layers: end -->"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports() -> dict[str, set[str]]:
    """Every module of las/ -> the las modules it imports, at its top or inside a function."""
    graph: dict[str, set[str]] = {}
    for path in sorted((ROOT / "las").rglob("*.py")):
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "las":
                found |= {node.module}
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names if alias.name.split(".")[0] == "las"}
        graph[module_name(path)] = found
    return graph


def layer(module: str) -> int:
    """The layer of a module: that of the longest package named in LAYERS that holds it."""
    return max(
        (index for index, package in enumerate(LAYERS) if module == package or module.startswith(package + ".")),
        key=lambda index: len(LAYERS[index]),
    )


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph.get(module, set()) & graph.keys()):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def picture(graph: dict[str, set[str]]) -> str:
    """The layers top to bottom, each with its modules' count and the layers below it they use."""
    lines = []
    for number in reversed(range(len(LAYERS))):
        members = [module for module in graph if layer(module) == number]
        used = {layer(target) for module in members for target in graph[module]} - {number}
        below = ", ".join(LAYERS[target] for target in sorted(used, reverse=True)) or "nothing of las"
        lines.append(f"{number}  {LAYERS[number]:<16} {len(members):>2} modules  uses {below}")
    return "\n".join(lines)


def documented() -> str:
    text = LAYOUT.read_text()
    block = text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip()
    return block.removeprefix("```").removesuffix("```").strip()


def test_every_import_goes_to_its_own_layer_or_one_below() -> None:
    graph = imports()
    upward = [
        f"{module} (layer {layer(module)}) imports {target} (layer {layer(target)})"
        for module, targets in graph.items()
        for target in targets
        if layer(target) > layer(module)
    ]
    assert not upward, "\n".join(upward)


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert cycles(imports()) == []


def test_the_cycle_finder_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_package_says_what_it_owns_and_what_it_may_use() -> None:
    for package in LAYERS[:-1]:
        text = ast.get_docstring(ast.parse((ROOT / package.replace(".", "/") / "__init__.py").read_text())) or ""
        assert f"Layer {LAYERS.index(package)}:" in text, package


def test_the_layout_page_shows_the_layers_the_code_has() -> None:
    assert documented() == picture(imports()), "python -m tests.test_layers writes the picture into docs/layout.md"


if __name__ == "__main__":
    text = LAYOUT.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    LAYOUT.write_text(text[:start] + "\n```\n" + picture(imports()) + "\n```\n" + text[end:])
