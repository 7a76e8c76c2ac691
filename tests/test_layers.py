"""The layers docs/architecture.md draws, checked statically over the source (`ast`, every import at any
depth of a module, the lazy ones inside functions included): protocol <- engine <- agent;
protocol <- wire <- clients / ui / record; cli on top; no cycle between packages; the torch-free
packages reach no torch, and the core no Textual or Rich, directly or through another module.
A failure names the chain of imports that breaks the rule."""

from __future__ import annotations

import ast
import pathlib
from collections import deque

import pytest

import gradtui

pytestmark = pytest.mark.timeout(60)

PACKAGE = pathlib.Path(gradtui.__file__).resolve().parent

MAY_IMPORT = {
    "protocol": set(),
    "wire": {"protocol"},
    "clients": {"protocol", "wire"},
    "record": {"protocol", "wire"},
    "ui": {"protocol", "wire", "clients"},
    "serve": {"protocol", "wire", "clients", "ui"},
    "engine": {"protocol"},
    "distributed": {"protocol", "wire", "engine"},
    "agent": {"protocol", "wire", "record", "engine", "distributed"},
    "cli": {"protocol", "wire", "clients", "record", "ui", "serve", "engine", "distributed", "agent"},
    "": {"agent", "cli"},  # gradtui/__init__ (listen) and __main__
}
"""What each package may import besides itself."""

KNOWN_CROSSINGS: set[tuple[str, str]] = set()
"""Imports that break a rule today, each to go when its owner moves the shared types down a layer
(none now: fingerprints' shared types are gradtui.protocol.fingerprints'). A crossing listed here
that is no longer made fails the test, so the list only shrinks."""

TORCH_FREE = ("protocol", "wire", "clients", "record", "ui", "serve")
NO_TEXTUAL = ("protocol", "engine", "agent", "distributed", "wire", "record", "clients")


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["gradtui", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(path: pathlib.Path) -> set[str]:
    """Every absolute module name `path` imports, at any depth (`from a import b` counts a and a.b)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    return names


def _resolve(name: str) -> str:
    """The gradtui module an import names (`gradtui.protocol.events.Output` -> gradtui.protocol.events)."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _graph() -> dict[str, set[str]]:
    """Module -> what it imports: gradtui modules by name, anything else by its top-level name."""
    graph = {}
    for module, path in MODULES.items():
        edges = set()
        for name in _imports(path):
            if name == "gradtui" or name.startswith("gradtui."):
                if (target := _resolve(name)) != module:
                    edges.add(target)
            else:
                edges.add(name.split(".")[0])
        graph[module] = edges
    return graph


GRAPH = _graph()


def package_of(module: str) -> str:
    """`engine` for gradtui.engine.session; "" for gradtui itself and gradtui.__main__."""
    return "" if module in ("gradtui", "gradtui.__main__") else module.split(".")[1]


def _chain(start: str, reached) -> list[str] | None:
    """The shortest chain of imports from `start` to a name `reached` accepts, or None."""
    before: dict[str, str | None] = {start: None}
    todo = deque([start])
    while todo:
        module = todo.popleft()
        for name in sorted(GRAPH.get(module, ())):
            if name in before:
                continue
            before[name] = module
            if reached(name):
                chain = [name]
                while (step := before[chain[-1]]) is not None:
                    chain.append(step)
                return chain[::-1]
            if name in GRAPH:
                todo.append(name)
    return None


def test_each_package_imports_only_the_layers_below_it():
    crossings = set()
    for module, edges in GRAPH.items():
        mine = package_of(module)
        for target in edges:
            if target in MODULES and (theirs := package_of(target)) != mine and theirs not in MAY_IMPORT[mine]:
                crossings.add((module, target))
    assert crossings - KNOWN_CROSSINGS == set(), "imports across the layers: " + ", ".join(
        f"{a} -> {b}" for a, b in sorted(crossings - KNOWN_CROSSINGS)
    )
    assert KNOWN_CROSSINGS <= crossings, f"no longer made, drop from KNOWN_CROSSINGS: {KNOWN_CROSSINGS - crossings}"


def test_no_cycle_between_packages():
    edges = {(package_of(m), package_of(t)) for m, ts in GRAPH.items() for t in ts if t in MODULES}
    edges = {(a, b) for a, b in edges if a != b}
    for a, b in sorted(edges):
        back = _package_path(b, a, edges)
        assert back is None, f"packages in a cycle: {a} -> {' -> '.join(back or [])}"


def _package_path(start: str, goal: str, edges: set[tuple[str, str]]) -> list[str] | None:
    before: dict[str, str | None] = {start: None}
    todo = deque([start])
    while todo:
        here = todo.popleft()
        if here == goal:
            path = [here]
            while (step := before[path[-1]]) is not None:
                path.append(step)
            return path[::-1]
        for a, b in edges:
            if a == here and b not in before:
                before[b] = here
                todo.append(b)
    return None


@pytest.mark.parametrize("package", TORCH_FREE)
def test_the_torch_free_packages_reach_no_torch_through_any_module(package):
    for module in sorted(m for m in MODULES if package_of(m) == package):
        chain = _chain(module, lambda name: name == "torch")
        assert chain is None, f"{module} reaches torch: {' -> '.join(chain or [])}"


@pytest.mark.parametrize("package", NO_TEXTUAL)
def test_the_core_reaches_no_textual_or_rich(package):
    for module in sorted(m for m in MODULES if package_of(m) == package):
        chain = _chain(module, lambda name: name in ("textual", "rich"))
        assert chain is None, f"{module} reaches {chain[-1] if chain else ''}: {' -> '.join(chain or [])}"


def test_the_rules_see_what_they_check():
    """The graph is the real one: a known import is in it, and a chain is found through modules."""
    assert "gradtui.protocol.events" in GRAPH["gradtui.wire.codec"]
    assert package_of("gradtui.engine.session") == "engine" and package_of("gradtui.protocol") == "protocol"
    assert package_of("gradtui.__main__") == "" and package_of("gradtui") == ""
    chain = _chain("gradtui.agent.build", lambda name: name == "torch")
    assert chain is not None and chain[0] == "gradtui.agent.build" and chain[-1] == "torch" and len(chain) >= 3


KNOWN_MODULE_CYCLES: set[frozenset[str]] = set()
"""Module cycles that remain, each its owner's to break; one broken fails the test until it is
dropped from here, so the list only shrinks."""


def _module_cycles() -> set[frozenset[str]]:
    """Every strongly connected group of more than one gradtui module (Tarjan, iteratively)."""
    graph = {m: sorted(t for t in ts if t in MODULES) for m, ts in GRAPH.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[frozenset[str]] = set()
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(graph[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    work.append((target, iter(graph[target])))
                    break
                if target in stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while (member := stack.pop()) != node:
                        group.add(member)
                    group.add(node)
                    if len(group) > 1:
                        found.add(frozenset(group))
    return found


def test_no_cycle_between_modules():
    cycles = _module_cycles()
    assert cycles - KNOWN_MODULE_CYCLES == set(), (
        f"modules in a cycle: {[sorted(c) for c in cycles - KNOWN_MODULE_CYCLES]}"
    )
    assert KNOWN_MODULE_CYCLES <= cycles, f"broken, drop from KNOWN_MODULE_CYCLES: {KNOWN_MODULE_CYCLES - cycles}"
