"""Parameter names (gradtui.engine.capture.names.module_tree): one loop over a module tree gives exactly
what torch's `named_parameters()` and `modules()` give, in their order, or torch's own answer where
a module overrides how it is walked."""

from __future__ import annotations

import sys
from pathlib import Path

from torch import nn

from gradtui.engine.capture.names import Names, module_tree

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))


def _as_torch(module: nn.Module) -> tuple[list[tuple[str, int]], set[int]]:
    return [(name, id(p)) for name, p in module.named_parameters()], {id(m) for m in module.modules()}


def _as_tree(module: nn.Module) -> tuple[list[tuple[str, int]], set[int]]:
    tree = module_tree(module)
    return [(name, id(p)) for name, p in tree.params], tree.modules


class Shared(nn.Module):
    """A module used twice, a tied weight, a None child and a None parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(3, 3)
        self.again = self.inner
        self.head = nn.Linear(3, 3)
        self.head.weight = self.inner.weight
        self.gone = None
        self.register_parameter("unset", None)
        self.blocks = nn.Sequential(nn.LayerNorm(3), nn.Sequential(nn.Linear(3, 2), nn.ReLU()))


class Renaming(nn.Module):
    """A module that names its parameters its own way (as FSDP1 strips its wrappers' prefixes)."""

    def __init__(self) -> None:
        super().__init__()
        self.wrapped = nn.Linear(2, 2)

    def named_parameters(self, *args, **kwargs):
        for name, p in super().named_parameters(*args, **kwargs):
            yield name.removeprefix("wrapped."), p


class Walks(nn.Module):
    """A module that walks its children its own way."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(2, 2)

    def named_modules(self, *args, **kwargs):
        yield from ()


def test_the_tree_is_torchs_for_an_encoder_and_for_shared_parts():
    from bench_models import transformer

    for module in (transformer(2, 64), Shared(), nn.Linear(2, 2), nn.ReLU()):
        assert _as_tree(module) == _as_torch(module)


def test_a_module_walking_its_own_way_gets_torchs_answer():
    for module in (Renaming(), nn.Sequential(Walks(), nn.Linear(2, 2))):
        assert _as_tree(module) == _as_torch(module)
    assert [name for name, _ in module_tree(Renaming()).params] == ["weight", "bias"]


def test_names_from_scopes_name_parameters_as_before():
    model = Shared()
    names = Names.from_scopes({"model": model, "layer": model.blocks})
    assert names.params[id(model.inner.weight)] == "inner.weight"
    assert names.params[id(model.blocks[1][0].bias)] == "blocks.1.0.bias"
    assert len(names.params) == len(list(model.parameters()))
    lone = nn.Linear(2, 2)
    assert Names.from_scopes({"fc": lone}).params == {id(lone.weight): "fc.weight", id(lone.bias): "fc.bias"}
