"""Tests for gradtui.engine.provenance.forward: source lines and module paths recorded on grad_fns."""

from __future__ import annotations

import gc
import inspect
import threading

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.modules import module as nn_module
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack

from gradtui.engine.provenance.forward import Provenance, module_of, source_of
from tests.helpers import graph_nodes

HERE = __file__


def _line_of(func, text: str) -> int:
    """The line number of the first line of `func`'s source that contains `text`."""
    lines, start = inspect.getsourcelines(func)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _nodes(root) -> list:
    """Every node reachable from `root`, parents before children (as graph.capture reads them)."""
    return graph_nodes(root)


def _ops(root) -> list:
    return [n for n in _nodes(root) if not hasattr(n, "variable")]


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x):
        h = torch.tanh(self.fc1(x))
        return self.fc2(h)


def _chain(x):
    line = inspect.currentframe().f_lineno
    y = x * 3
    z = y**2
    return y, z, line


def test_chain_records_this_file_and_lines():
    x = torch.ones(2, requires_grad=True)
    with Provenance():
        y, z, line = _chain(x)
    assert source_of(y.grad_fn) == (HERE, line + 1)
    assert source_of(z.grad_fn) == (HERE, line + 2)
    assert module_of(y.grad_fn) is None


def test_module_names_and_call_lines():
    model = MLP()
    with Provenance():
        out = model(torch.randn(5, 4))
    fc2 = out.grad_fn
    inputs = {fn.name(): fn for fn, _ in fc2.next_functions if fn is not None}
    tanh = inputs["TanhBackward0"]
    fc1 = tanh.next_functions[0][0]
    assert [fc2.name(), fc1.name()] == ["AddmmBackward0", "AddmmBackward0"]
    # Recorded led by the root's variable; a capture drops the lead when one root is in scope.
    assert (module_of(fc1), module_of(fc2)) == ("model.fc1", "model.fc2")
    assert source_of(fc1) == (HERE, _line_of(MLP.forward, "self.fc1(x)"))
    assert source_of(fc2) == (HERE, _line_of(MLP.forward, "self.fc2(h)"))
    # Ops in the root's own forward are named by the variable that holds the root.
    assert module_of(tanh) == "model"
    # F.linear's TBackward0 is not returned by the call; it is labelled from the Addmm node.
    t = inputs["TBackward0"]
    assert (module_of(t), source_of(t)) == ("model.fc2", source_of(fc2))


def test_sequential_children_are_named_by_index():
    seq = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
    with Provenance():
        line = inspect.currentframe().f_lineno + 1
        out = seq(torch.randn(5, 4))
    names = {(n.name(), module_of(n)) for n in _ops(out.grad_fn)}
    assert {("AddmmBackward0", "seq.0"), ("ReluBackward0", "seq.1"), ("AddmmBackward0", "seq.2")} <= names
    assert {source_of(n) for n in _ops(out.grad_fn)} == {(HERE, line)}


def test_transformer_layer_nodes_name_its_submodules():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    with Provenance():
        line = inspect.currentframe().f_lineno + 1
        out = layer(torch.randn(2, 5, 16))
    # The outermost node is recorded directly, during the forward.
    assert out.grad_fn.name() == "NativeLayerNormBackward0"
    assert out.grad_fn.metadata["gradtui.module"] == "layer.norm2"
    ops = _ops(out.grad_fn)
    assert all(source_of(n) == (HERE, line) for n in ops)
    modules = {module_of(n) for n in ops}
    assert {"layer.self_attn", "layer.linear1", "layer.linear2", "layer.norm1", "layer.norm2", "layer"} <= modules


def test_modules_outside_the_tree_are_named_by_class():
    class Blocks(nn.Module):
        def __init__(self):
            super().__init__()
            self.head = nn.Linear(2, 2)
            self.loose = [nn.Linear(2, 2)]  # a plain list: not a registered submodule

        def forward(self, x):
            return self.head(self.loose[0](x))

    blocks = Blocks()
    with Provenance():
        out = blocks(torch.ones(1, 2))
    assert module_of(out.grad_fn) == "blocks.head"
    assert module_of(out.grad_fn.next_functions[1][0]) == "blocks.Linear"


def test_common_layers_are_recorded():
    torch.manual_seed(0)
    conv = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2))
    lstm = nn.LSTM(4, 5, batch_first=True)
    emb = nn.Embedding(10, 4)
    with Provenance():
        line = inspect.currentframe().f_lineno + 1
        a = conv(torch.randn(2, 1, 5, 5)).mean()
        out, (h, _) = lstm(torch.randn(2, 3, 4))
        e = F.cross_entropy(emb(torch.tensor([1, 2])), torch.tensor([0, 3]))
        total = a + out.sum() + h.sum() + e
    ops = _ops(total.grad_fn)
    assert all(source_of(n) is not None and source_of(n)[0] == HERE for n in ops)
    by_name = {n.name(): (module_of(n), source_of(n)[1]) for n in ops}
    assert by_name["ConvolutionBackward0"] == ("conv.0", line)
    assert by_name["NativeBatchNormBackward0"] == ("conv.1", line)
    assert by_name["EmbeddingBackward0"] == ("emb", line + 2)
    assert by_name["NllLossBackward0"] == (None, line + 2)
    assert any(module == "lstm" for module, _ in by_name.values())


def test_uninstall_leaves_nothing_behind():
    pre, post = len(nn_module._global_forward_pre_hooks), len(nn_module._global_forward_hooks)
    modes = len(_get_current_function_mode_stack())
    apply = torch.autograd.Function.__dict__["apply"]
    call = nn.Module.__dict__["__call__"]
    prov = Provenance()
    prov.install()
    prov.install()  # idempotent
    assert nn.Module.__dict__["__call__"] is not call
    assert len(nn_module._global_forward_pre_hooks) == pre  # no global module hook: torch's fast path
    assert torch.autograd.Function.__dict__["apply"] is not apply
    prov.uninstall()
    prov.uninstall()
    assert torch.autograd.Function.__dict__["apply"] is apply
    assert nn.Module.__dict__["__call__"] is call
    assert len(nn_module._global_forward_pre_hooks) == pre
    assert len(nn_module._global_forward_hooks) == post
    assert len(_get_current_function_mode_stack()) == modes
    y = nn.Linear(2, 2)(torch.ones(1, 2)) * 2
    assert "gradtui.source" not in y.grad_fn.metadata
    assert source_of(y.grad_fn) is None and module_of(y.grad_fn) is None


def test_users_own_mode_and_no_grad_still_work():
    class Counting(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            self.calls += 1
            return func(*args, **(kwargs or {}))

    x = torch.ones(2, requires_grad=True)
    with Provenance():
        with torch.no_grad():
            assert (x * 2).grad_fn is None
        with Counting() as counting:
            line = inspect.currentframe().f_lineno + 1
            y = x * 3
        assert counting.calls >= 1
        # The user's __torch_function__ forwarded the call; the op's line is still the source.
        assert source_of(y.grad_fn) == (HERE, line)
    # A mode the script left entered is kept; only ours is removed.
    left = Counting()
    prov = Provenance()
    prov.install()
    left.__enter__()
    prov.uninstall()
    assert _get_current_function_mode_stack()[-1] is left
    left.__exit__(None, None, None)


def test_module_stack_survives_an_exception_in_forward():
    class Boom(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(2, 2)

        def forward(self, x):
            self.fc(x)
            raise ValueError("boom")

    prov = Provenance()
    model = MLP()
    with prov:
        with pytest.raises(ValueError):
            Boom()(torch.ones(1, 2))
        assert prov.module_calls.running() == []
        out = model(torch.randn(1, 4))
    assert module_of(out.grad_fn) == "model.fc2"


def test_recording_does_not_change_gradients():
    def grads(record: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)  # dropout on: RNG too
        x = torch.randn(2, 5, 16, requires_grad=True)
        if record:
            with Provenance():
                layer(x).pow(2).sum().backward()
        else:
            layer(x).pow(2).sum().backward()
        return [x.grad] + [p.grad for p in layer.parameters()]

    assert all(torch.equal(a, b) for a, b in zip(grads(True), grads(False), strict=True))


def test_name_cache_does_not_keep_models_alive():
    prov = Provenance()
    sizes = []

    def train_fresh_models():
        # In a function: its frame's f_locals snapshot (read to name the root) dies with it.
        for _ in range(200):
            model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 1))
            model(torch.randn(2, 3)).sum().backward()
            sizes.append(len(prov.module_calls.roots))

    with prov:
        train_fresh_models()
        gc.collect()
        assert max(sizes) <= 2
        assert prov.module_calls.roots == {} and prov.module_calls.running() == []


def test_other_threads_are_not_recorded():
    installed, release = threading.Event(), threading.Event()
    seen = {}
    prov = Provenance()

    def worker():
        with prov:
            installed.set()
            release.wait(10)
            seen["worker"] = (torch.ones(1, requires_grad=True) * 2).grad_fn.metadata.copy()

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert installed.wait(10)
        main = nn.Linear(2, 2)(torch.ones(1, 2)) * 2
        assert dict(main.grad_fn.metadata) == {}
        assert (
            prov.module_calls.roots == {} and prov.module_calls.running(threading.get_ident()) is None
        )  # the main thread is ignored
    finally:
        release.set()
        thread.join(10)
    assert not thread.is_alive()
    assert seen["worker"]["gradtui.source"][0] == HERE


class _Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class _UsesDouble(nn.Module):
    def forward(self, x):
        return _Double.apply(x)


def test_custom_function_nodes_are_recorded_with_line_and_module():
    block = _UsesDouble()
    x = torch.ones(3, requires_grad=True)
    with Provenance():
        line = inspect.currentframe().f_lineno + 1
        direct = _Double.apply(x)
        inside = block(x)
    assert source_of(direct.grad_fn) == (HERE, line)
    assert source_of(inside.grad_fn) == (HERE, _line_of(_UsesDouble.forward, "_Double.apply"))
    assert module_of(inside.grad_fn) == "block"
    direct.sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 2.0))


def test_threads_started_while_installed_are_recorded():
    seen = {}

    def worker():
        seen["worker"] = source_of((torch.ones(1, requires_grad=True) * 2).grad_fn)
        seen["line"] = inspect.currentframe().f_lineno - 1

    with Provenance():
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join(10)
    assert not thread.is_alive()
    assert seen["worker"] == (HERE, seen["line"])
    assert threading.Thread.start.__module__ == "threading"  # unwrapped again


def test_suspended_takes_the_mode_off_and_puts_it_back_under_the_users_modes():
    class Mine(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with Provenance() as prov, Mine() as mine:
        assert _get_current_function_mode_stack()[-2:] == [prov, mine]
        with prov.suspended():
            assert prov not in _get_current_function_mode_stack()
            assert _get_current_function_mode_stack()[-1] is mine
            y = torch.ones(1, requires_grad=True) * 2
        assert _get_current_function_mode_stack()[-2:] == [prov, mine]
        z = torch.ones(1, requires_grad=True) * 3
    assert source_of(y.grad_fn) is None and source_of(z.grad_fn) is not None
    assert prov not in _get_current_function_mode_stack()


def test_torch_compile_compiles_each_models_forward_not_gradtuis_wrapper_of_module_call():
    """Dynamo compiles the first frame it may below a compiled module's `__call__`: gradtui's
    wrapper (one code object for every module) and its bookkeeping are skipped, so twelve models
    compile twelve forwards, as in a plain run, and none hits Dynamo's recompile limit (8)."""
    compiled = []

    def backend(gm, inputs):
        compiled.append(gm)
        return gm.forward

    def model(i):  # a forward of its own code object each, as distinct model classes have
        scope = {"torch": torch}
        exec(compile(f"def forward(self, x):\n    return torch.tanh(x) * {i}\n", f"<model {i}>", "exec"), scope)
        return type(f"Model{i}", (nn.Module,), {"forward": scope["forward"]})()

    with Provenance():
        outs = [torch.compile(model(i), backend=backend)(torch.ones(2, 3)) for i in range(12)]
    assert len(compiled) == 12
    assert all(torch.equal(out, torch.tanh(torch.ones(2, 3)) * i) for i, out in enumerate(outs))
