"""Provenance near its floor: the mode is off the thread's mode stack while
torch's own module code runs, and the nodes made meanwhile get their module paths and lines
from the module calls' sequence numbers, read lazily."""

from __future__ import annotations

import inspect
import threading

import pytest
import torch
import torch.nn as nn
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack

from gradtui.engine.provenance.forward import Provenance, module_of, source_of
from tests.helpers import graph_nodes

HERE = __file__


def _line_of(func, text: str) -> int:
    lines, start = inspect.getsourcelines(func)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _ops(root) -> list:
    return [n for n in graph_nodes(root) if not hasattr(n, "variable")]


class Counting(Provenance):
    """Provenance that counts the calls reaching its __torch_function__."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.seen += 1
        return super().__torch_function__(func, types, args, kwargs)


def _labelled(root) -> dict:
    """node -> (source, module) for each op of `root`'s graph, read parents first (as a capture
    reads them: a stretch's nodes are labelled from the outputs down)."""
    return {n: (source_of(n), module_of(n)) for n in _ops(root)}


def _ours_on_stack(mode) -> bool:
    return any(m is mode for m in _get_current_function_mode_stack())


@pytest.fixture(scope="module")
def encoder():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


def test_torchs_module_code_runs_without_the_mode_and_every_node_is_labelled(encoder):
    prov = Counting()
    with prov:
        data = torch.randn(2, 5, 16)
        made = prov.seen
        line = inspect.currentframe().f_lineno + 1
        out = encoder(data)
        assert prov.seen == made  # no op of torch's modules reached the mode
        assert _ours_on_stack(prov)  # back for the user's own code
        (data + 1).sum()
        assert prov.seen == made + 2
    ops = _ops(out.grad_fn)
    assert len(ops) > 50
    assert {source_of(n) for n in ops} == {(HERE, line)}
    modules = {module_of(n) for n in ops}
    assert None not in modules
    for i in range(2):
        assert {f"encoder.layers.{i}.{m}" for m in ("self_attn", "linear1", "linear2", "norm1", "norm2")} <= modules
    # The output node is labelled during the forward, by the innermost call that made it.
    assert out.grad_fn.metadata["gradtui.module"] == "encoder.layers.1.norm2"


def test_the_mode_is_off_inside_a_torch_module_and_on_inside_a_user_one():
    seen = {}

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            seen["block"] = _ours_on_stack(prov)
            return self.fc(x).relu()

    seq = nn.Sequential(nn.Linear(3, 3), Block(), nn.Linear(3, 3))
    seq[0].register_forward_pre_hook(lambda module, args: seen.__setitem__("linear", _ours_on_stack(prov)))
    prov = Provenance()
    with prov:
        line = inspect.currentframe().f_lineno + 1
        out = seq(torch.randn(2, 3))
        seen["after"] = _ours_on_stack(prov)
    assert seen == {"linear": False, "block": True, "after": True}
    by_module = {module_of(n): source_of(n) for n in _ops(out.grad_fn)}
    assert by_module["seq.0"] == by_module["seq.2"] == (HERE, line)
    # A torch module called from user code inside the stretch gets that code's line.
    assert by_module["seq.1.fc"] == (HERE, _line_of(Block.forward, "self.fc(x)"))
    # The user module's own op, labelled by the mode as it was made.
    assert by_module["seq.1"] == (HERE, _line_of(Block.forward, "self.fc(x)"))


def _swish(x):
    return x * torch.sigmoid(x)


class Swish(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


def test_a_user_callable_inside_a_torch_module_gets_the_modules_call_site():
    """What provenance gives up (docs/usage.md, known limits): user code that a torch module calls as a plain
    callable runs without the mode, so its nodes get the module's path and call site; the
    same code as an nn.Module gets its own line back."""
    torch.manual_seed(0)
    as_function = nn.TransformerEncoderLayer(16, 2, 32, activation=_swish, batch_first=True)
    as_module = nn.TransformerEncoderLayer(16, 2, 32, activation=Swish(), batch_first=True)
    with Provenance():
        line = inspect.currentframe().f_lineno + 1
        a = as_function(torch.randn(2, 5, 16))
        b = as_module(torch.randn(2, 5, 16))
    sig_a = next(v for n, v in _labelled(a.grad_fn).items() if n.name() == "SigmoidBackward0")
    sig_b = next(v for n, v in _labelled(b.grad_fn).items() if n.name() == "SigmoidBackward0")
    assert sig_a == ((HERE, line), "as_function")
    assert sig_b == ((HERE, _line_of(Swish.forward, "torch.sigmoid")), "as_module.activation")


def test_a_scripts_mode_above_ours_keeps_ours_on_and_the_labels_right():
    class Mine(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    seen = []
    fc = nn.Linear(2, 2)
    fc.register_forward_pre_hook(lambda module, args: seen.append(_ours_on_stack(prov)))
    prov = Provenance()
    with prov, Mine() as mine:
        line = inspect.currentframe().f_lineno + 1
        out = fc(torch.ones(1, 2))
        assert _get_current_function_mode_stack()[-2:] == [prov, mine]
    assert seen == [True]
    assert {(source_of(n), module_of(n)) for n in _ops(out.grad_fn)} == {((HERE, line), "fc")}


def test_an_exception_in_torchs_module_code_puts_the_mode_back():
    seen = []
    fc = nn.Linear(2, 2)
    fc.register_forward_pre_hook(lambda module, args: seen.append(_ours_on_stack(prov)))
    prov = Provenance()
    with prov:
        with pytest.raises(RuntimeError):
            fc(torch.ones(1, 3))  # wrong shape: F.linear raises
        assert _ours_on_stack(prov) and prov.module_calls.running() == []
        line = inspect.currentframe().f_lineno + 1
        y = torch.ones(1, requires_grad=True) * 2
    assert seen == [False]
    assert source_of(y.grad_fn) == (HERE, line)


def test_outputs_in_nested_containers_and_inputs_passed_through():
    torch.manual_seed(0)
    lstm = nn.LSTM(3, 4, batch_first=True)
    ident = nn.Identity()
    x = torch.randn(2, 5, 3, requires_grad=True)
    with Counting() as prov:
        line = inspect.currentframe().f_lineno + 1
        out, (h, c) = lstm(x)
        assert prov.seen == 0  # labelled from the stretch's span, not by the mode
        made = x * 2
        same = ident(made)
    for t in (out, h, c):
        ops = _ops(t.grad_fn)
        assert ops and all((source_of(n), module_of(n)) == ((HERE, line), "lstm") for n in ops)
    assert same is made and (source_of(same.grad_fn), module_of(same.grad_fn)) == ((HERE, line + 2), None)


def test_a_thread_started_while_installed_runs_torchs_modules_without_the_mode():
    seen = {}
    fc = nn.Linear(2, 2)
    fc.register_forward_pre_hook(lambda module, args: seen.__setitem__("inside", _ours_on_stack(prov)))

    def worker():
        seen["line"] = inspect.currentframe().f_lineno + 1
        seen["out"] = fc(torch.ones(1, 2))
        seen["after"] = _ours_on_stack(prov)

    prov = Provenance()
    with prov:
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join(10)
    assert not thread.is_alive()
    assert (seen["inside"], seen["after"]) == (False, True)
    assert (source_of(seen["out"].grad_fn), module_of(seen["out"].grad_fn)) == ((HERE, seen["line"]), "fc")


def test_gradients_are_unchanged_by_the_stretches(encoder):
    x = torch.randn(2, 5, 16)

    def grads(record: bool) -> list[torch.Tensor]:
        encoder.zero_grad()
        data = x.clone().requires_grad_()
        if record:
            with Provenance():
                encoder(data).pow(2).sum().backward()
        else:
            encoder(data).pow(2).sum().backward()
        return [data.grad] + [p.grad.clone() for p in encoder.parameters()]

    assert all(torch.equal(a, b) for a, b in zip(grads(True), grads(False), strict=True))


def test_a_keyboard_interrupt_in_torchs_module_code_closes_its_stretch_at_once():
    """A BaseException leaving torch's module code (which torch's always-called hooks would not
    see) closes the stretch as it passes the wrapper: the mode is back, no call left running."""
    fc = nn.Linear(2, 2)

    def interrupt(module, args):
        raise KeyboardInterrupt

    handle = fc.register_forward_pre_hook(interrupt)
    prov = Provenance()
    with prov:
        with pytest.raises(KeyboardInterrupt):
            fc(torch.ones(1, 2))
        assert _ours_on_stack(prov) and prov.module_calls.running() == []
        handle.remove()
        line = inspect.currentframe().f_lineno + 1
        out = fc(torch.ones(1, 2)) * 2
    assert (source_of(out.grad_fn), module_of(out.grad_fn)) == ((HERE, line), None)
    assert {module_of(n) for n in _ops(out.grad_fn)} == {None, "fc"}
