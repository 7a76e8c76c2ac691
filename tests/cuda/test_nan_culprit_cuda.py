"""The NaN culprit on CUDA: on an accelerator the statistics are read back every few nodes
(gradtui.engine.stats.watch), not at every node, yet the `nan` watch must name the same node as
a pass that reads at every node, and the gradients must stay torch's. The five cases of the CPU
test (tests/engine/hooks/test_pass_through.py) on a 2-layer encoder on the GPU. Skipped where
there is no CUDA device."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from gradtui.engine.session import Session
from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from tests.helpers import same

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available() is False)"),
    pytest.mark.timeout(120),
]

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

CASES = ["clean", "overflow", "masked-inf", "masked-nan", "deep"]


def _case(case: str):
    """`build() -> (leaves, loss)` of the case on the GPU (the CPU test's cases, moved)."""
    from bench_models import transformer

    cuda = torch.device("cuda")
    model = transformer(2, 16).to(cuda)
    data = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(1)).to(cuda)

    def build():
        x = data * 1e18 if case == "overflow" else data  # finite forward, a float32 overflow on the way back
        hidden = []
        handle = model.layers[1].linear1.register_forward_hook(lambda m, i, o: hidden.append(o))
        out = model(x)
        handle.remove()
        match case:
            case "masked-inf":
                out = out.masked_fill(torch.arange(16, device=cuda) == 3, -math.inf).softmax(-1)
            case "masked-nan":
                out = torch.where(out > 0, out.sqrt(), out)
            case "deep":  # a NaN made on the way back inside the second layer, by a user's tensor hook
                hidden[0].register_hook(lambda g: g.index_fill(-1, torch.tensor([2], device=cuda), math.nan))
        model.zero_grad(set_to_none=True)
        return list(model.parameters()), out.pow(2).mean() * (1e30 if case == "overflow" else 1.0)

    return build


def _run(build, check_every: int | None):
    """One pass under a session in `continue` with a `nan` watch; its events and leaves' gradients."""
    events: list[ev.Event] = []
    session = Session(events.append, provenance=False, full_stats=False, check_every=check_every)
    session.add_listener(lambda e: isinstance(e, ev.Paused) and session.submit(parse("continue")))
    session.run_on()
    session.submit(parse("break nan"))
    with session:
        leaves, loss = build()
        loss.backward()
        torch.cuda.synchronize()
    return events, [None if leaf.grad is None else leaf.grad.clone() for leaf in leaves]


def _plain(build):
    leaves, loss = build()
    loss.backward()
    torch.cuda.synchronize()
    return [None if leaf.grad is None else leaf.grad.clone() for leaf in leaves]


def _culprits(events):
    """(node name, phase) of each `nan` hit, by the graph the pass started with."""
    graph = next(e for e in events if isinstance(e, ev.PassStarted)).graph
    hits = [e for e in events if isinstance(e, ev.BreakpointHit)]
    pauses = [e for e in events if isinstance(e, ev.Paused)]
    return [(graph.nodes[h.node]["info"].name, h.node) for h in hits], pauses


@pytest.mark.parametrize("case", CASES)
def test_the_nan_watch_names_on_cuda_the_node_an_every_node_pass_names(case):
    build = _case(case)
    plain, again = _plain(build), _plain(build)
    assert all(same(a, b) for a, b in zip(plain, again, strict=True)), (
        "the device's own backward is not deterministic here"
    )
    read_in_bulk, grads = _run(build, None)  # the accelerator's read rate (CHECK_EVERY nodes)
    every_node, grads_every = _run(build, 1)
    hits, pauses = _culprits(read_in_bulk)
    assert hits == _culprits(every_node)[0]
    assert (case in ("clean", "masked-inf")) == (not hits)  # a softmax of a masked -inf is finite
    assert len(pauses) == len(hits)
    assert all(same(a, b) for a, b in zip(grads, plain, strict=True))
    assert all(same(a, b) for a, b in zip(grads_every, plain, strict=True))
    for e in read_in_bulk:
        if isinstance(e, ev.PassFinished):
            assert e.error is None, e.error


def test_the_culprit_on_cuda_is_the_culprit_on_the_cpu():
    """The same model and NaN on the CPU and on the GPU: the same node is named."""
    build = _case("deep")
    gpu_hits, _ = _culprits(_run(build, None)[0])
    from tests.helpers import encoder_case, run_pass

    cpu_events, _ = run_pass(encoder_case("deep"), ["continue"])
    cpu_hits, _ = _culprits(cpu_events)
    assert [name for name, _ in gpu_hits] == [name for name, _ in cpu_hits] and gpu_hits
