"""PyTorch's own OpInfo samples through a Session: every op whose backward
can send a ZeroTensor, and 100 others picked evenly from op_db, each sample's gradients in
`continue`, in `step` mode and at double backward exactly a plain run's (NaN-aware), or the same
exception where the plain run raises one."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils._pytree import tree_leaves

from gradtui.engine.session import Session
from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from tests.helpers import ZERO_TENSOR_OPS, Outcome, check_outcome, fresh_sample, graph_nodes, sample_leaves

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning"),
]  # ops' own deprecations

OTHERS = 100
SAMPLES = 2
"""Samples per op: the first ones op_db gives (the small, plain cases)."""
DTYPE = torch.float64


@pytest.fixture(scope="module")
def op_db() -> list[Any]:
    from torch.testing._internal.common_methods_invocations import op_db as ops

    return [op for op in ops if op.supports_autograd and DTYPE in op.supported_dtypes("cpu")]


def _loss(op: Any, sample: Any) -> torch.Tensor | None:
    """A weighted sum of every differentiable output (weights break symmetries a plain sum has)."""
    torch.manual_seed(0)  # ops that draw random numbers draw the same ones in every run
    out = sample.output_process_fn_grad(op(sample.input, *sample.args, **sample.kwargs))
    total = None
    for t in tree_leaves(out):
        if not (isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())):
            continue
        if t.is_complex():
            t = torch.view_as_real(t.resolve_conj()).sum(-1)
        weight = torch.linspace(0.5, 1.5, t.numel(), dtype=t.dtype).reshape(t.shape)
        term = (t * weight).sum()
        total = term if total is None else total + term
    return total


def _first_order(op: Any, sample: Any) -> Outcome:
    sample = fresh_sample(sample)
    leaves = sample_leaves(sample)
    try:
        loss = _loss(op, sample)
        if loss is None:
            return ("grads", None)
        loss.backward()
    except Exception as exc:  # noqa: BLE001 - the plain run's failure is what gradtui must repeat
        return ("raised", type(exc).__name__)
    return ("grads", [leaf.grad for leaf in leaves])


def _double(op: Any, sample: Any, zero_tensors: list[int] | None = None) -> Outcome:
    """First-order gradients with create_graph, then the backward of their sum."""
    sample = fresh_sample(sample)
    leaves = sample_leaves(sample)
    try:
        loss = _loss(op, sample)
        if loss is None:
            return ("grads", None)
        firsts = torch.autograd.grad(loss, leaves, create_graph=True, allow_unused=True)
        second = [g.sum() for g in firsts if g is not None and g.requires_grad]
        if not second:
            return ("grads", [None if g is None else g.detach() for g in firsts])
        total = torch.stack(second).sum()
        if zero_tensors is not None:  # count the ZeroTensors the second backward sends
            for node in graph_nodes(total.grad_fn):
                node.register_hook(
                    lambda gi, go: zero_tensors.extend(
                        1 for g in gi if isinstance(g, torch.Tensor) and g._is_zerotensor()
                    )
                )
        total.backward()
    except Exception as exc:  # noqa: BLE001
        return ("raised", type(exc).__name__)
    return ("grads", [None if g is None else g.detach() for g in firsts] + [leaf.grad for leaf in leaves])


def _debugged(run: Callable[[], Outcome], answer: str) -> tuple[Outcome, list[ev.Event]]:
    """`run()` under a Session that answers every pause with `answer` (in the pausing thread)."""
    events: list[ev.Event] = []
    session = Session(events.append)
    session.add_listener(lambda e: isinstance(e, ev.Paused) and session.submit(parse(answer)))
    with session:
        outcome = run()
    return outcome, events


def _run_ops(ops: list[Any]) -> tuple[int, int]:
    """Check every sample of `ops`; returns (samples compared, ZeroTensors the plain runs sent)."""
    compared = zeros = 0
    for op in ops:
        for k, sample in enumerate(itertools.islice(op.sample_inputs("cpu", DTYPE, requires_grad=True), SAMPLES)):
            name = f"{op.name}.{op.variant_test_name or ''}[{k}]"
            plain = _first_order(op, sample)
            for answer in ("continue", "step"):
                check_outcome(f"{name} {answer}", plain, *_debugged(lambda: _first_order(op, sample), answer))
            counted: list[int] = []
            plain_double = _double(op, sample, counted)
            check_outcome(f"{name} double", plain_double, *_debugged(lambda: _double(op, sample), "continue"))
            zeros += len(counted)
            compared += 1
    return compared, zeros


def test_every_op_that_sends_zero_tensors(op_db):
    ops = [op for op in op_db if op.name in ZERO_TENSOR_OPS]
    assert {op.name for op in ops} == set(ZERO_TENSOR_OPS)  # none renamed away
    compared, zeros = _run_ops(ops)
    assert compared >= len(ZERO_TENSOR_OPS)
    assert zeros > len(ZERO_TENSOR_OPS)  # the samples do send ZeroTensors: the case is covered


def test_a_hundred_other_ops(op_db):
    others = sorted(
        (op for op in op_db if op.name not in ZERO_TENSOR_OPS), key=lambda op: (op.name, op.variant_test_name)
    )
    step = len(others) / OTHERS
    ops = [others[int(i * step)] for i in range(OTHERS)]
    compared, _ = _run_ops(ops)
    assert compared >= OTHERS
