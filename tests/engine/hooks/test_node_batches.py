"""A planned pass's node results as NodesRan batches (gradtui.engine.hooks.batches): a listener that
takes batches gets no NodeRan during the pass and pays for no derived statistics unless it reads
them; read, they are the NodeRan events a listener that takes none gets, in the same order; a
listener that says it reads no flow makes a hooked pass skip the leaves' statistics and the
flow; and the codec carries a batch as its events."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

from gradtui.engine.hooks import batches as ranbatch
from gradtui.engine.hooks import plan
from gradtui.engine.session import Session
from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from gradtui.protocol.stats import VALUES_LIMIT
from gradtui.wire.codec import from_wire, to_wire
from tests.helpers import count_calls

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))


def _model():
    from bench import transformer

    return transformer(2, 64), torch.randn(4, 8, 64)


def _run(model, data, *, flow: bool = True, nan: bool = True, alone: bool = False):
    """One pass in continue (a `nan` watch) with two listeners: one taking batches (and the flow if
    `flow`), one not; `alone`: the first only."""
    plain: list[ev.Event] = []
    batched: list[ev.Event] = []
    session = Session(None if alone else plain.append, provenance=False, full_stats=False)
    session.add_listener(batched.append, graph=False, batches=True, flow=flow)
    session.run_on()
    if nan:
        session.submit(parse("break nan"))
    with session:
        model(data).pow(2).mean().backward()
    model.zero_grad(set_to_none=True)
    return plain, batched


def test_a_batch_listener_gets_the_same_node_results_in_batches():
    model, data = _model()
    plain, batched = _run(model, data)
    assert not [e for e in batched if isinstance(e, ev.NodeRan)]
    batches = [e for e in batched if isinstance(e, ev.NodesRan)]
    assert batches and not [e for e in plain if isinstance(e, ev.NodesRan)]
    singles = [e for e in plain if isinstance(e, ev.NodeRan)]
    flat = [one for batch in batches for one in batch.ran]
    assert flat == singles
    assert sum(batch.count for batch in batches) == len(flat)
    assert [e.order for e in flat] == list(range(1, len(flat) + 1))
    nodes = next(e for e in plain if isinstance(e, ev.PassStarted)).graph.number_of_nodes()
    assert len({e.node for e in flat}) == nodes  # every node reported once


def test_nothing_is_derived_until_a_batch_is_read(monkeypatch):
    derived = count_calls(monkeypatch, ranbatch, "derive_from")
    model, data = _model()
    events: list[ev.Event] = []
    session = Session(None, provenance=False, full_stats=False)
    session.add_listener(events.append, graph=False, batches=True)
    session.run_on()
    session.submit(parse("break nan"))
    with session:
        model(data).pow(2).mean().backward()
    assert derived[0] == 0
    batches = [e for e in events if isinstance(e, ev.NodesRan)]
    last = batches[-1].ran  # the last batch makes the ones before it first
    assert derived[0] > 0 and last
    assert [one for batch in batches for one in batch.ran][-len(last) :] == list(last)


def test_a_listener_that_reads_no_flow_skips_it_and_one_that_does_gets_it():
    model, data = _model()
    _, batched = _run(model, data, flow=False, alone=True)
    finished = next(e for e in batched if isinstance(e, ev.PassFinished))
    assert finished.flow == () and finished.leaf_grads == ()
    plain, _ = _run(model, data, flow=False)  # the other listener reads it
    finished = next(e for e in plain if isinstance(e, ev.PassFinished))
    assert len(finished.flow) == len(list(model.parameters())) and finished.leaf_grads
    by_name = {row.name: row for row in finished.flow}
    model(data).pow(2).mean().backward()  # torch is the oracle
    for name, param in model.named_parameters():
        want = torch.linalg.vector_norm(param.grad).item()
        assert math.isclose(by_name[name].grad_norm, want, rel_tol=1e-6)
    model.zero_grad(set_to_none=True)


def test_a_listener_that_reads_the_flow_but_no_leaves_gets_the_same_flow_and_no_leaf_statistics(monkeypatch):
    """A recording or a report (`leaves=False`): the pass computes its flow, the very rows a
    listener reading the leaves too gets, and makes no leaf statistics (no LeafRead)."""
    from gradtui.engine.stats import passrecord

    model, data = _model()

    def finished(leaves: bool) -> ev.PassFinished:
        events: list[ev.Event] = []
        session = Session(None, provenance=False, full_stats=False)
        session.add_listener(events.append, graph=False, batches=True, leaves=leaves)
        session.run_on()
        assert session.wants_flow() and session.wants_leaves() == leaves
        with session:
            model(data).pow(2).mean().backward()
        model.zero_grad(set_to_none=True)
        return next(e for e in events if isinstance(e, ev.PassFinished))

    with_leaves = finished(True)
    reads = count_calls(monkeypatch, passrecord, "LeafRead")
    without = finished(False)
    assert reads == [0] and without.leaf_grads == () and with_leaves.leaf_grads
    assert len(without.flow) == len(list(model.parameters()))
    assert without.flow == with_leaves.flow  # the same norms, to the bit
    sizes = [p.numel() for p in model.parameters()]
    assert max(sizes) > VALUES_LIMIT >= min(sizes)  # gradients a leaf read norms and ones it lists: both compared


def test_the_codec_carries_a_batch_as_its_events():
    model, data = _model()
    _, batched = _run(model, data)
    batch = next(e for e in batched if isinstance(e, ev.NodesRan))
    back = from_wire(to_wire(batch))
    assert isinstance(back, ev.NodesRan) and back.pass_index == batch.pass_index
    assert back.ran == batch.ran and back.count == batch.count


def test_a_batch_and_its_pass_end_cross_the_wire_in_one_conversion_each(monkeypatch):
    """The codec converts a NodesRan batch and a PassFinished whole (their Structs packed by
    msgspec in C), not a call per node, per statistic and per listed value: the agent's writer
    and a reader in the script's process would otherwise hold its GIL for longer than the pass
    took (about 9,700 conversions a frame on the d=64 encoder)."""
    from gradtui.wire import codec

    model, data = _model()
    _, batched = _run(model, data)
    batch = next(e for e in batched if isinstance(e, ev.NodesRan))
    finished = next(e for e in batched if isinstance(e, ev.PassFinished))
    assert batch.count > 20 and finished.leaf_grads  # nodes and leaves enough to count conversions for
    packed = count_calls(monkeypatch, codec, "to_wire")
    unpacked = count_calls(monkeypatch, codec, "from_wire")
    wired = [codec.to_wire(batch), codec.to_wire(finished)]
    back = [codec.from_wire(data) for data in wired]
    assert (packed[0], unpacked[0]) == (2, 2)  # the calls above, none nested
    assert back[0].ran == batch.ran and back[1] == finished


def test_shapes_sent_on_follow_from_what_arrives_as_torch_makes_them():
    x = torch.randn(2, 3, 4, requires_grad=True)
    cases = {
        "TBackward0": x[0].t(),
        "TransposeBackward0": x.transpose(0, -1),
        "PermuteBackward0": x.permute(2, -3, 1),
        "UnsqueezeBackward0": x.unsqueeze(-2),
        "CloneBackward0": x.clone(),
    }
    for name, y in cases.items():
        node = y.grad_fn
        assert type(node).__name__ == name
        shape, saved = plan.shape_and_saved(node, name)
        assert shape is None
        assert plan.sent_shape(name, saved, tuple(y.shape)) == tuple(node.next_functions[0][0]._input_metadata[0].shape)


def test_a_pass_nobody_looks_at_collects_no_names_and_a_pause_still_names_its_leaves(monkeypatch):
    from gradtui.engine.capture import names as names_module

    collected = [0]
    original = names_module.Names.from_scopes.__func__

    def counted(cls, *scopes, **roots):
        collected[0] += 1
        return original(cls, *scopes, **roots)

    monkeypatch.setattr(names_module.Names, "from_scopes", classmethod(counted))
    lin = torch.nn.Linear(3, 2)
    events: list[ev.Event] = []
    session = Session(None, provenance=False, full_stats=False)
    session.add_listener(events.append, graph=False, batches=True, flow=False)
    session.run_on()
    session.submit(parse("break nan"))

    def on(event):
        if isinstance(event, ev.Paused):
            session.submit(parse("continue"))

    session.add_listener(on, graph=False, batches=True, flow=False)
    x = torch.ones(4, 3)
    with session:
        lin(x).pow(2).sum().backward()
        assert collected[0] == 0  # nothing paused, nobody reads the graph or the flow
        (lin(x) * torch.tensor([0.0, 1.0])).log().sum().backward()  # log(0): -inf, then a NaN: it pauses
    assert any(isinstance(e, ev.Paused) for e in events) and collected[0] == 1
    graph = [e for e in events if isinstance(e, ev.PassStarted)][-1].graph
    params = {graph.nodes[i]["info"].param for i in graph.nodes if graph.nodes[i]["info"].kind == "accumulate"}
    assert params == {"lin.weight", "lin.bias"}


def _counting_reads(monkeypatch) -> list[int]:
    """Counts the reads of a derived node's saved values (its shape, dims) from the live node."""
    from gradtui.engine.hooks import derived

    return count_calls(monkeypatch, derived, "shape_and_saved")


def test_no_derived_node_is_read_when_no_one_holds_a_batch(monkeypatch):
    """A batch marks the nodes derived from a hooked node instead of reading each from the live
    graph: a pass whose listener drops its batches reads none; one whose listener keeps them has
    them read at the pass's end, while its nodes live, and gets what a listener taking NodeRan
    events gets."""
    reads = _counting_reads(monkeypatch)
    model, data = _model()
    session = Session(None, provenance=False, full_stats=False)
    session.add_listener(lambda event: None, graph=False, batches=True, flow=False)
    session.submit(parse("break nan"))
    session.run_on()
    with session:
        model(data).pow(2).mean().backward()
    model.zero_grad(set_to_none=True)
    assert reads[0] == 0
    _, held = _run(model, data, alone=True)
    assert reads[0] > 0  # at the pass's end, before anyone read a batch
    plain, _ = _run(model, data)
    flat = [one for batch in held if isinstance(batch, ev.NodesRan) for one in batch.ran]
    assert flat and flat == [e for e in plain if isinstance(e, ev.NodeRan)]


def test_a_batch_makes_the_node_ran_events_its_init_makes():
    """A batch writes each NodeRan's slots directly: equal, hashed, printed and sent as `__init__` makes it."""
    model, data = _model()
    _, batched = _run(model, data, alone=True)
    made = [one for batch in batched if isinstance(batch, ev.NodesRan) for one in batch.ran]
    assert made
    for one in made:
        want = ev.NodeRan(one.pass_index, one.node, one.order, one.grad_outputs, one.grad_inputs)
        assert one == want and hash(one) == hash(want) and repr(one) == repr(want)
        assert from_wire(to_wire(one)) == want


def test_a_batch_kept_after_batches_dropped_unread_reads_as_a_listener_taking_events_gets_it(monkeypatch):
    """Batches dropped unread are compacted to what later batches need of them (what their nodes
    sent, for receivers further on) at the next flush: a listener that keeps every third batch
    reads, in those, exactly the NodeRan events a listener that takes events gets, and the pass's
    gradients are torch's."""
    from gradtui.engine.hooks import planned

    monkeypatch.setattr(planned, "PROGRESS_INTERVAL", 0.0)  # a batch every few hooked nodes
    monkeypatch.setattr(planned, "READ_EVERY", 1)
    model, data = _model()
    plain, _ = _run(model, data, nan=True)  # a listener taking NodeRan events: each batch made at once
    kept: list[ev.NodesRan] = []
    seen = [0]

    def every_third(event: ev.Event) -> None:
        if isinstance(event, ev.NodesRan):
            seen[0] += 1
            if seen[0] % 3 == 0:
                kept.append(event)  # the others are dropped unread, and nothing else reads them

    session = Session(None, provenance=False, full_stats=False)
    session.add_listener(every_third, graph=False, batches=True, flow=False)
    session.submit(parse("break nan"))
    session.run_on()
    with session:
        model(data).pow(2).mean().backward()
    got = {name: p.grad.clone() for name, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    model(data).pow(2).mean().backward()  # torch alone: the oracle
    assert all(torch.equal(got[name], p.grad) for name, p in model.named_parameters())
    assert seen[0] >= 9 and len(kept) >= 3  # several dropped between the kept ones
    singles = {e.node: e for e in plain if isinstance(e, ev.NodeRan)}
    read = [one for batch in kept for one in batch.ran]
    assert read and len(read) == sum(batch.count for batch in kept)
    assert read == [singles[one.node] for one in read]
    assert sum(one.grad_outputs[0] is not None for one in read if one.grad_outputs) > len(read) // 2
