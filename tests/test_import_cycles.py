"""No import cycle in ``bot``: every module's imports (top-level, inside functions and under
``TYPE_CHECKING`` alike) form a graph without a loop."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import bot

ROOT = Path(bot.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _imported(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """The ``bot`` modules ``name`` imports. ``from pkg import x`` is an edge to ``pkg.x`` when
    that is a module, else to ``pkg`` (its ``__init__``)."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known:
                    yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                candidate = f"{source}.{alias.name}"
                if candidate in known:
                    yield candidate
                elif source in known:
                    yield source


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {
        name: {target for target in _imported(name, path, known) if target != name}
        for name, path in modules.items()
    }


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as ``[a, b, ..., a]``, or None."""
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(graph, white)
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        colour[node] = grey
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if colour.get(target, black) == grey:
                return [*stack[stack.index(target) :], target]
            if colour.get(target) == white:
                found = visit(target)
                if found:
                    return found
        stack.pop()
        colour[node] = black
        return None

    for node in sorted(graph):
        if colour[node] == white:
            found = visit(node)
            if found:
                return found
    return None


def test_bot_has_no_import_cycle() -> None:
    """Walking every module of ``bot`` finds no import cycle (the message names one if it does)."""
    cycle = find_cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_walk_sees_function_level_and_type_checking_imports() -> None:
    """The graph holds the imports the cycle check must see: one made inside a function (the
    simulator probe, imported where the probe is made) and one under TYPE_CHECKING (the
    settings, in the simulator probe)."""
    graph = _graph()
    assert "bot.agent.host.sim" in graph["bot.agent.service"]
    assert "bot.agent.config" in graph["bot.agent.host.sim"]


def test_a_cycle_is_found_and_named() -> None:
    """A graph with a loop gives that loop, in order, closed on its first module."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
