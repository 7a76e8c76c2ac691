"""Statistics read back in bulk (gradtui.engine.stats.window), the value watch over them (watch.py), the
host-read probe (tests/helpers.py's HostReads) and the networkx view built only when read. Counts, not times."""

from __future__ import annotations

import math
import threading

import pytest
import torch
from torch import nn

from gradtui.engine.session import CHECK_EVERY, READ_EVERY, Session
from gradtui.engine.stats.summary import summarize
from gradtui.engine.stats.window import StatsWindow, resolve
from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from gradtui.protocol.lazygraph import is_built
from tests.helpers import HostReads, compiled_off

pytestmark = pytest.mark.timeout(120)


def encoder(layers: int = 4, width: int = 32) -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(width, 4, 2 * width, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


def counted_pass(monkeypatch, spec: str | None, full: bool = False) -> tuple[int, HostReads, list[ev.Event]]:
    """One backward of a 4-layer encoder in `continue` under the probe: (nodes, reads, events), as
    an accelerator's pass reads (through torch's Python calls: the compiled library, which reads
    CPU tensors in C++ where nothing syncs, is off)."""
    compiled_off(monkeypatch, "off: an accelerator's reads")
    model = encoder()
    data = torch.randn(4, 8, 32)
    events: list[ev.Event] = []
    # An accelerator's read rate (a CPU pass reads at every node with a watch: no sync to save)
    session = Session(events.append, provenance=False, full_stats=full, check_every=CHECK_EVERY)
    session.run_on()
    if spec:
        session.submit(parse(f"break {spec}"))
    loss = model(data).pow(2).mean()
    with session, HostReads() as reads:
        loss.backward()
    (started,) = [e for e in events if isinstance(e, ev.PassStarted)]
    return len(started.graph), reads, events


@pytest.mark.parametrize(
    ("spec", "full", "every"),
    [
        (None, False, READ_EVERY),
        ("nan", False, CHECK_EVERY),
        ("norm>1e9", False, CHECK_EVERY),
        ("nan", True, CHECK_EVERY),
    ],
)
def test_host_reads_per_node_in_continue(monkeypatch, spec, full, every):
    nodes, reads, events = counted_pass(monkeypatch, spec, full)
    assert nodes > 200
    # One read per `every` nodes (the window), one for the leaves' gradients, one or two for the
    # gradient flow (two fused norms), the loss's value: nothing per node.
    assert reads.total <= math.ceil(nodes / every) + 4, dict(reads.counts)
    assert reads.counts["item"] == 0
    assert reads.total / nodes <= (0.05 if spec is None else 0.2)
    ran = [e for e in events if isinstance(e, ev.NodeRan)]
    assert len(ran) == nodes and sorted(e.order for e in ran) == list(range(1, nodes + 1))


def test_the_probe_counts_host_reads_on_its_threads_only():
    t = torch.tensor([1.5, 2.0])
    with HostReads() as reads:
        t.tolist(), t[0].item(), float(t[0]), bool(t[0] > 1), int(t[1]), t.nonzero()
        t.cpu()  # already on the host: no read
        other = threading.Thread(target=lambda: t.tolist())
        other.start()
        other.join(10)
    assert dict(reads.counts) == {"tolist": 1, "item": 1, "__float__": 1, "__bool__": 1, "__int__": 1, "nonzero": 1}
    assert torch.Tensor.tolist is not None and t.tolist() == [1.5, 2.0]  # restored


def test_window_stats_are_summarize_stats():
    """Every kind of gradient, through the window, gives what summarize gives (norms to float
    rounding: small tensors' are taken in float64 from their values)."""
    big = torch.randn(300)
    big[7] = math.nan
    tensors = [
        torch.randn(8, 40),
        torch.randn(5),
        torch.tensor(2.0),
        torch.tensor([1.0, math.inf, -1.0]),
        big,
        torch.randn(40, 3).t(),
        torch.randn(6, dtype=torch.float64),
        torch.randn(100).half(),
        torch._efficientzerotensor(4),
        torch.full((200,), 3e38),
    ]
    for light in (True, False):
        window = StatsWindow()
        handles = [window.add(t, light) for t in tensors]
        got = resolve(handles, window.read())
        assert window.nonfinite
        for t, s in zip(tensors, got):
            want = summarize(t, light=light)
            assert (s.shape, s.dtype, s.nonfinite, s.values is None) == (
                want.shape,
                want.dtype,
                want.nonfinite,
                want.values is None,
            ), t
            assert s.norm == pytest.approx(want.norm, rel=1e-6, nan_ok=True), t
            for a, b in ((s.min, want.min), (s.max, want.max)):
                assert a == b or (a != a and b != b), t
            assert (s.mean is None) == (want.mean is None), t
            if s.mean is not None:
                assert s.mean == pytest.approx(want.mean, rel=1e-5, abs=1e-6, nan_ok=True), t
    assert not StatsWindow().nonfinite


def chain(depth: int, bad_at: int | None = None):
    """x -> `depth` muls; the multiplication number `bad_at` (counted from x) is by sqrt at zero's
    derivative's partner, so its backward makes the first NaN: returns (x, loss)."""
    x = torch.tensor([1.0, 0.0, 4.0], requires_grad=True)
    y = x
    for i in range(depth):
        y = y.sqrt() * torch.tensor([2.0, 0.0, 1.0]) if i == bad_at else y * 1.0
    return x, y.sum()


def run_chain(commands: list[str], depth: int, bad_at: int | None, check_every: int = CHECK_EVERY):
    events: list[ev.Event] = []
    session = Session(events.append, provenance=False, check_every=check_every)
    feed = iter(commands)

    def on(event: ev.Event) -> None:
        if isinstance(event, ev.Paused):
            for command in feed:
                session.submit(parse(command))
                if command in ("continue", "step"):
                    return
            session.detach()  # the commands ran out: never pause again

    session.add_listener(on)
    x, loss = chain(depth, bad_at)
    with session:
        loss.backward()
    return events, x


@pytest.mark.parametrize("check_every", [1, CHECK_EVERY])
def test_nan_read_in_bulk_names_the_node_that_made_it(check_every):
    events, x = run_chain(["break nan", "continue", "zero", "continue"], 30, bad_at=10, check_every=check_every)
    started = next(e for e in events if isinstance(e, ev.PassStarted))
    pauses = [e for e in events if isinstance(e, ev.Paused)]
    assert len(pauses) == 2
    pause = pauses[1]
    assert pause.name == "SqrtBackward0" and pause.phase == "after"
    assert started.graph.nodes[pause.node]["info"].name == "SqrtBackward0"
    assert pause.grads[0].nonfinite == 1
    (hit,) = [e for e in events if isinstance(e, ev.BreakpointHit)]
    assert hit.node == pause.node
    ran = [e.node for e in events if isinstance(e, ev.NodeRan)]
    order = ran.index(pause.node)
    later = pause.done - (order + 1)  # nodes that ran between the culprit and the pause
    assert 0 <= later <= check_every - 1
    assert (later > 0) == ("had run" in pause.reason)
    refused = [e for e in events if isinstance(e, ev.CommandResult) and e.command == "zero"]
    assert refused and not refused[0].ok and "already run" in refused[0].text
    assert events.index(pause) < next(i for i, e in enumerate(events) if isinstance(e, ev.PassFinished))
    want_x, want_loss = chain(30, 10)
    want_loss.backward()
    assert torch.equal(x.grad.isnan(), want_x.grad.isnan()) and torch.equal(
        x.grad.nan_to_num(), want_x.grad.nan_to_num()
    )


def test_norm_read_in_bulk_stops_late_before_the_node_and_refuses_edits():
    # The gradient arriving at every node but the first is ones(3), of norm sqrt(3).
    events, _ = run_chain(["break norm>1", "continue", "scale 2", "continue"], 20, bad_at=None)
    pauses = [e for e in events if isinstance(e, ev.Paused)]
    assert len(pauses) >= 2
    late = pauses[1]
    assert late.phase == "before" and late.reason.startswith("breakpoint 1: norm>1 at #")
    assert late.grads[0].norm > 1 and "had run" in late.reason
    refused = [e for e in events if isinstance(e, ev.CommandResult) and e.command == "scale 2"]
    assert refused and not refused[0].ok


def test_the_networkx_view_is_built_only_when_read():
    events: list[ev.PassStarted] = []
    session = Session(lambda e: events.append(e) if isinstance(e, ev.PassStarted) else None, provenance=False)
    session.run_on()
    session.submit(parse("break nan"))
    x = torch.randn(5, requires_grad=True)
    with session:
        (x.exp() * 2).sum().backward()
    (started,) = events
    assert not is_built(started.graph) and started.graph.number_of_nodes() == 4
    assert [started.graph.nodes[i]["info"].name for i in range(4)] == [
        "SumBackward0",
        "MulBackward0",
        "ExpBackward0",
        "AccumulateGrad",
    ]
    assert is_built(started.graph) and list(started.graph.edges) == [(0, 1), (1, 2), (2, 3)]
    assert started.graph.nodes[3]["info"].kind == "accumulate"
