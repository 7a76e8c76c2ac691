"""PyTorch's OpInfo samples through a Session on CUDA: every op whose backward can send a
ZeroTensor and 30 others picked evenly from op_db, each sample's gradients in every mode
(`continue`, `continue` with a `nan` watch, `step`, and double backward in `continue`) exactly
a plain CUDA run's (NaN-aware), or the same exception where the plain run raises one. The CPU
test (tests/engine/test_opinfo.py) with the samples made on the GPU. Skipped where there is no
CUDA device."""

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
from tests.helpers import ZERO_TENSOR_OPS, Outcome, check_outcome, fresh_sample, sample_leaves

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available() is False)"),
    pytest.mark.timeout(240),
    pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning"),
]

DEVICE = "cuda"
OTHERS = 30
SAMPLES = 2
DTYPE = torch.float64
MODES = (["continue"], ["break nan", "continue"], ["step"])
"""What each pause is answered with (in order); the last answers every later pause."""


@pytest.fixture(scope="module")
def op_db() -> list[Any]:
    from torch.testing._internal.common_methods_invocations import op_db as ops

    return [op for op in ops if op.supports_autograd and DTYPE in op.supported_dtypes(DEVICE)]


def _loss(op: Any, sample: Any) -> torch.Tensor | None:
    """A weighted sum of every differentiable output, the weights on the output's device."""
    torch.manual_seed(0)
    out = sample.output_process_fn_grad(op(sample.input, *sample.args, **sample.kwargs))
    total = None
    for t in tree_leaves(out):
        if not (isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())):
            continue
        if t.is_complex():
            t = torch.view_as_real(t.resolve_conj()).sum(-1)
        weight = torch.linspace(0.5, 1.5, t.numel(), dtype=t.dtype, device=t.device).reshape(t.shape)
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
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001 - the plain run's failure is what gradtui must repeat
        return ("raised", type(exc).__name__)
    return ("grads", [leaf.grad for leaf in leaves])


def _double(op: Any, sample: Any) -> Outcome:
    """First-order gradients with create_graph, then the backward of their sum."""
    sample = fresh_sample(sample)
    leaves = sample_leaves(sample)
    try:
        loss = _loss(op, sample)
        if loss is None:
            return ("grads", None)
        firsts = torch.autograd.grad(loss, leaves, create_graph=True, allow_unused=True)
        second = [g.sum() for g in firsts if g is not None and g.requires_grad]
        if second:
            torch.stack(second).sum().backward()
        torch.cuda.synchronize()
    except Exception as exc:  # noqa: BLE001
        return ("raised", type(exc).__name__)
    return ("grads", [None if g is None else g.detach() for g in firsts] + [leaf.grad for leaf in leaves])


def _debugged(run: Callable[[], Outcome], answers: list[str]) -> tuple[Outcome, list[ev.Event]]:
    """`run()` under a Session that answers its pauses with `answers` (the last one for good)."""
    events: list[ev.Event] = []
    session = Session(events.append)
    left = list(answers)

    def on(event: ev.Event) -> None:
        if isinstance(event, ev.Paused):
            while len(left) > 1 and left[0].startswith("break"):
                session.submit(parse(left.pop(0)))
            session.submit(parse(left.pop(0) if len(left) > 1 else left[0]))

    session.add_listener(on)
    with session:
        outcome = run()
    return outcome, events


def _run_ops(ops: list[Any]) -> int:
    compared = 0
    for op in ops:
        for k, sample in enumerate(itertools.islice(op.sample_inputs(DEVICE, DTYPE, requires_grad=True), SAMPLES)):
            name = f"{op.name}.{op.variant_test_name or ''}[{k}] on {DEVICE}"
            plain = _first_order(op, sample)
            for answers in MODES:
                check_outcome(
                    f"{name} {' + '.join(answers)}", plain, *_debugged(lambda: _first_order(op, sample), answers)
                )
            check_outcome(f"{name} double", _double(op, sample), *_debugged(lambda: _double(op, sample), ["continue"]))
            compared += 1
    return compared


def test_every_op_that_sends_zero_tensors_on_cuda(op_db):
    ops = [op for op in op_db if op.name in ZERO_TENSOR_OPS]
    assert ops
    assert _run_ops(ops) >= len(ops)


def test_thirty_other_ops_on_cuda(op_db):
    others = sorted(
        (op for op in op_db if op.name not in ZERO_TENSOR_OPS), key=lambda op: (op.name, op.variant_test_name)
    )
    step = len(others) / OTHERS
    assert _run_ops([others[int(i * step)] for i in range(OTHERS)]) >= OTHERS
