"""What the calling frame of a backward call names: which variables refer to which tensors, and the
parameters' names in the modules in scope (a capture's labels and `param`s come from here)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch

from gradtui.engine.provenance import forward as provenance

_LIST_LABEL_LIMIT = 256  # label list elements `outs[3]` only for reasonably short lists


@dataclass
class Names:
    """What the calling frame knows: which names refer to which tensors and parameters."""

    by_grad_fn: dict[int, list[str]] = field(default_factory=dict)
    """id(grad_fn) -> variable names whose tensor has that grad_fn."""
    by_leaf: dict[int, list[str]] = field(default_factory=dict)
    """id(leaf tensor) -> variable names bound to it."""
    params: dict[int, str] = field(default_factory=dict)
    """id(parameter) -> its name in its module, e.g. "fc.weight"."""
    several_roots: bool = False
    """More than one root module with parameters is in scope (a GAN's `netG` and `netD`): then
    parameter names and module paths are led by the root's variable (`netG.0.weight`)."""
    ready = True
    """Are the names collected (not `LaterNames` yet)? A lazy capture's walk names no leaf until then."""

    def leaf_name(self, leaf_id: int) -> str | None:
        """What these names call the leaf tensor with id `leaf_id`: its parameter's name, else its
        first variable name (None: neither)."""
        return self.params.get(leaf_id) or next(iter(self.by_leaf.get(leaf_id, ())), None)

    @classmethod
    def from_scopes(cls, *scopes: Mapping[str, Any], ran: Mapping[torch.nn.Module, str] | None = None) -> Names:
        """Collect names from scopes in priority order (locals, then globals), and the names of the
        parameters of `ran` (the roots whose forward ran, each with the name leading its module
        paths: provenance's `forward_roots`) that no module in scope holds."""
        names = cls()
        modules: dict[int, tuple[str, torch.nn.Module]] = {}
        for scope in scopes:
            for var, value in list(scope.items()):
                if var.startswith("__"):
                    continue
                if isinstance(value, torch.Tensor):
                    names._add(var, value)
                elif isinstance(value, (list, tuple)) and 0 < len(value) <= _LIST_LABEL_LIMIT:
                    for i, item in enumerate(value):
                        if isinstance(item, torch.Tensor):
                            names._add(f"{var}[{i}]", item)
                elif isinstance(value, torch.nn.Module):
                    modules.setdefault(id(value), (var, value))
        names._name_params(list(modules.values()), ran or {})
        return names

    def _name_params(self, modules: list[tuple[str, torch.nn.Module]], forward: Mapping[torch.nn.Module, str]) -> None:
        """Parameter names, unique across the root modules in scope (those no other one contains),
        then across the roots whose forward ran that no module in scope holds (a model that only a
        trainer's object holds, when backward runs inside accelerate)."""
        trees = {id(module): module_tree(module) for _, module in modules}
        inside: set[int] = set()
        for _, module in modules:
            inside.update(trees[id(module)].modules - {id(module)})
        roots = [(var, m) for var, m in modules if id(m) not in inside and trees[id(m)].params]
        ran = [(var, m) for var, m in roots if m in provenance.forward_roots]
        self.several_roots = len(ran or roots) > 1
        for var, module in roots + [(var, m) for var, m in modules if id(m) in inside]:
            # A model's parameters are named within it (`fc.weight`); a lone layer's by its
            # variable (`fc = nn.Linear(...)` gives `fc.weight`, not `weight`); with several
            # roots, every name by its root's variable.
            lone = not any(True for _ in module.children())
            prefix = var + "." if lone or (self.several_roots and id(module) not in inside) else ""
            for pname, param in trees[id(module)].params:
                self.params.setdefault(id(param), prefix + pname)
        self._name_unseen_roots(forward, inside | trees.keys(), bool(roots))

    def _name_unseen_roots(self, forward: Mapping[torch.nn.Module, str], seen: set[int], scoped: bool) -> None:
        """Name the parameters of the forward's roots that no module in scope is or holds, as
        their module paths are named (`0.weight` in module `model.0`): led by the root's name
        where roots in scope were named too, or where several such roots ran."""
        unseen = [(lead, module) for module, lead in list(forward.items()) if id(module) not in seen]
        trees = [(lead, module, module_tree(module)) for lead, module in unseen]
        inside = {key for _, module, tree in trees for key in tree.modules if key != id(module)}
        trees = [(lead, module, tree) for lead, module, tree in trees if tree.params and id(module) not in inside]
        if not scoped:
            self.several_roots = len(trees) > 1
        for lead, module, tree in trees:
            lone = not any(True for _ in module.children())
            prefix = lead + "." if scoped or lone or self.several_roots else ""
            for pname, param in tree.params:
                self.params.setdefault(id(param), prefix + pname)

    def _add(self, var: str, tensor: torch.Tensor) -> None:
        if tensor.grad_fn is not None:
            known = self.by_grad_fn.setdefault(id(tensor.grad_fn), [])
        elif tensor.requires_grad:
            known = self.by_leaf.setdefault(id(tensor), [])
        else:
            return
        if var not in known:  # at module level, locals and globals are the same dict
            known.append(var)


class LaterNames(Names):
    """Names collected from scopes at their first read, not before: a pass in `continue` that
    nobody looks at (a lazy capture, no flow wanted) never needs them. The scopes are the calling
    frame's, which lives as long as the pass."""

    def __init__(self, *scopes: Mapping[str, Any], ran: Mapping[torch.nn.Module, str] | None = None) -> None:
        # not the dataclass's: nothing is collected yet
        self._scopes: tuple[Mapping[str, Any], ...] | None = scopes
        self._ran = ran
        self._names: Names | None = None

    def _collected(self) -> Names:
        if self._names is None:
            self._names = Names.from_scopes(*(self._scopes or ()), ran=self._ran)
            self._scopes = self._ran = None
        return self._names

    by_grad_fn = property(lambda self: self._collected().by_grad_fn)
    by_leaf = property(lambda self: self._collected().by_leaf)
    params = property(lambda self: self._collected().params)
    several_roots = property(lambda self: self._collected().several_roots)
    ready = property(lambda self: self._names is not None)


class Tree(NamedTuple):
    """A module's parameters as `named_parameters()` gives them, and the ids of every module in it."""

    params: list[tuple[str, torch.nn.Parameter]]
    modules: set[int]


_MODULE = torch.nn.Module


def module_tree(module: torch.nn.Module) -> Tree:
    """`module.named_parameters()` and the ids of `module.modules()`, in one loop over the module
    tree instead of torch's nested generators (~3x faster: a pass whose flow is wanted names every
    parameter of the model in scope). Torch's own methods where a module overrides how they walk
    (FSDP1 names its wrapped parameters without its wrappers' prefixes)."""
    kind = type(module)
    if kind.named_parameters is not _MODULE.named_parameters or kind._named_members is not _MODULE._named_members:
        return _torch_tree(module)
    params: list[tuple[str, torch.nn.Parameter]] = []
    seen_params: set[int] = set()
    seen: set[int] = set()
    stack: list[tuple[str, torch.nn.Module]] = [("", module)]
    while stack:  # pre-order, children in registration order, each module and parameter once: named_modules' order
        prefix, here = stack.pop()
        if id(here) in seen:
            continue
        if type(here).named_modules is not _MODULE.named_modules:
            return _torch_tree(module)
        seen.add(id(here))
        for key, param in here._parameters.items():
            if param is not None and id(param) not in seen_params:
                seen_params.add(id(param))
                params.append((prefix + key, param))
        if here._modules:
            children = [(prefix + key + ".", child) for key, child in here._modules.items() if child is not None]
            stack += reversed(children)
    return Tree(params, seen)


def _torch_tree(module: torch.nn.Module) -> Tree:
    return Tree(list(module.named_parameters()), {id(m) for m in module.modules()})
