"""Every private torch symbol gradtui uses comes from gradtui.engine.compat, one place to port:
each is present on this torch and does what its callers rely on, and no other module of
gradtui imports a private torch name."""

from __future__ import annotations

import ast
import pathlib

import pytest
import torch

from gradtui.engine import compat

CORE = pathlib.Path(compat.__file__).parent.parent


def test_compat_exposes_every_symbol():
    for name in compat.SYMBOLS:
        assert hasattr(compat, name), name
        assert callable(getattr(compat, name)), name


def test_the_symbols_behave_as_gradtui_relies_on():
    assert compat.current_graph_task_id() == -1  # outside any engine call
    seen = []
    x = torch.ones(2, requires_grad=True)
    y = x * 2
    y.grad_fn.register_prehook(lambda g: seen.append(compat.current_graph_task_id()))
    y.sum().backward()
    assert len(seen) == 1 and seen[0] != -1
    assert compat.is_compiling() is False
    assert compat.functorch_level() is None
    assert compat.is_legacy_batched(x) is False
    before = compat.get_sequence_nr()
    x * 3
    assert compat.get_sequence_nr() == before + 1
    edge = compat.get_gradient_edge(y)
    assert isinstance(edge, compat.GradientEdge) and edge.node is y.grad_fn
    assert compat.is_zerotensor(torch.zeros(1)) is False
    assert compat.is_zerotensor(torch._efficientzerotensor(2)) is True


def test_modes_push_and_pop_through_compat():
    class Mode(torch.overrides.TorchFunctionMode):
        pass

    mode = Mode()
    depth = len(compat.get_function_mode_stack())
    compat.push_mode(mode)
    try:
        assert compat.get_function_mode_stack()[-1] is mode
    finally:
        assert compat.pop_mode() is mode
    assert len(compat.get_function_mode_stack()) == depth


def _private_torch_imports(path: pathlib.Path) -> list[str]:
    """`from torch... import _x`, `import torch._x` and `torch._x` / `torch._C` attribute reads."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch"):
            if any(part.startswith("_") for part in (node.module or "").split(".")):
                found.append(f"from {node.module}")
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "torch"
            and node.attr.startswith("_")
        ):
            found.append(f"torch.{node.attr}")
    return found


@pytest.mark.parametrize(
    "module", ["session", "intercept", "stats/passrecord", "dispatch", "why", "process/runner", "provenance/forward"]
)
def test_the_modules_this_layer_owns_import_no_private_torch_name(module):
    assert _private_torch_imports(CORE / "engine" / f"{module}.py") == []
