"""Fingerprints: the sketch's estimate of ‖a - b‖ and how a pass's values are gathered."""

from __future__ import annotations

import math

import torch

from gradtui.engine.fingerprints import sketch
from gradtui.engine.fingerprints import values as fp
from gradtui.protocol.breakpoints import parse_spec
from gradtui.protocol.fingerprints import RECEIVED, SENT, estimate_distance
from tests.helpers import HostReads


def test_sketch_estimates_relative_distance_within_a_factor_of_two():
    """On 1,000 random pairs (shapes and scales varied, seeded), the estimate of ‖a-b‖/‖a‖ from
    the two sketches alone is within a factor of 2 of the exact value on at least 95 %."""
    g = torch.Generator().manual_seed(1234)
    within = 0
    worst = []
    for i in range(1000):
        shape = ((3 + i % 7) * 11, 2 + i % 5)  # > EXACT_LIMIT elements: sketched, not kept whole
        a = torch.randn(shape, generator=g)
        scale = 10.0 ** float(torch.empty(()).uniform_(-6, 0, generator=g))
        b = a + scale * torch.randn(shape, generator=g)
        exact = (torch.linalg.vector_norm((a - b).double()) / torch.linalg.vector_norm(a.double())).item()
        sa, sb = fp.buckets_and_norm(a.double())[0].tolist(), fp.buckets_and_norm(b.double())[0].tolist()
        estimate = estimate_distance(tuple(sa), tuple(sb)) / torch.linalg.vector_norm(a.double()).item()
        ratio = estimate / exact
        worst.append(ratio)
        within += 0.5 <= ratio <= 2.0
    assert within >= 950, (within, min(worst), max(worst))


def test_signs_are_the_same_in_every_run():
    """The signs are a pure integer hash of the position: pinned here, since a recording made
    with other signs could not be compared with one made with these."""
    assert fp.hashed_signs(16).int().tolist() == [-1, -1, 1, -1, 1, 1, -1, 1, -1, -1, 1, 1, 1, -1, 1, 1]
    assert torch.equal(fp.signs(1000, torch.float64, torch.device("cpu")), fp.hashed_signs(1000))
    assert abs(fp.hashed_signs(1 << 16).mean().item()) < 0.02


def test_sketch_follows_values_not_layout_and_spreads_a_column():
    """A transposed tensor and its contiguous copy have one sketch (up to rounding: each is
    reduced in its own memory order); a difference in one column of a matrix whose width is a
    multiple of K still reaches every entry (estimated within 2x on most of 200 matrices;
    summing by position modulo K would put it in one entry)."""
    g = torch.Generator().manual_seed(3)
    a = torch.randn(96, 40, generator=g, dtype=torch.float64).t()
    assert torch.allclose(fp.buckets_and_norm(a)[0], fp.buckets_and_norm(a.contiguous())[0], rtol=1e-12, atol=1e-12)
    within = 0
    for i in range(200):
        a = torch.randn(8 + i % 40, 64, generator=g, dtype=torch.float64)
        d = torch.zeros_like(a)
        d[:, i % 64] = 1e-2
        estimate = estimate_distance(
            tuple(fp.buckets_and_norm(a)[0].tolist()), tuple(fp.buckets_and_norm(a + d)[0].tolist())
        )
        within += 0.5 <= estimate / torch.linalg.vector_norm(d).item() <= 2.0
    assert within >= 180, within


def test_a_matrix_and_its_transpose_have_one_sketch_bit_for_bit():
    """sketch(a.t()) == sketch(a) bit for bit (tall, wide, square; float32 and float64), as does a
    view that keeps the last dimension; a square matrix's transpose is read in its memory order."""
    g = torch.Generator().manual_seed(5)
    for shape in ((70, 80), (80, 70), (64, 64), (3, 300), (300, 2)):
        for dtype in (torch.float32, torch.float64):
            a = torch.randn(shape, generator=g, dtype=dtype)
            assert torch.equal(fp.buckets_and_norm(a.t())[0], fp.buckets_and_norm(a)[0]), (shape, dtype)
            assert torch.equal(fp.buckets_and_norm(a.view(1, *shape))[0], fp.buckets_and_norm(a)[0]), (shape, dtype)
    a = torch.randn(60, 50, generator=g, dtype=torch.float64)
    assert torch.allclose(fp.buckets_and_norm(a.t().contiguous())[0], fp.buckets_and_norm(a)[0], rtol=1e-12, atol=1e-12)
    assert not torch.allclose(
        fp.buckets_and_norm(a.reshape(50, 60))[0], fp.buckets_and_norm(a)[0]
    )  # a reshape is another matrix


def test_the_grids_signs_are_the_same_in_every_run():
    """Sketch 2's signs are a pure integer hash of the position in the canonical orientation:
    pinned here (a recording made with other signs could not be compared with one made with
    these), and a square's are symmetric."""
    cpu = torch.device("cpu")
    g = sketch.grid(2, 6, torch.float64, cpu)
    assert g.signs.int().tolist() == [[-1, -1, -1, -1, -1, -1], [1, 1, -1, -1, -1, -1]]
    assert torch.equal(sketch.grid(6, 2, torch.float64, cpu).signs, g.signs.t())
    assert abs(sketch.grid(256, 1024, torch.float64, cpu).signs.mean().item()) < 0.01
    square = sketch.grid(9, 9, torch.float64, cpu).signs
    assert torch.equal(square, square.t()) and abs(square.mean().item()) < 0.5


def test_chunked_sketch_of_a_huge_tensor_is_linear_and_estimates():
    """A tensor of more than CHUNK elements is projected chunk by chunk: still linear
    (sketch(a) - sketch(b) = sketch(a - b)) and the estimate of a far difference is near it."""
    g = torch.Generator().manual_seed(7)
    a = torch.randn(fp.CHUNK * 2 + 1000, generator=g, dtype=torch.float64)
    d = torch.zeros_like(a)
    d[fp.CHUNK + 5 : fp.CHUNK + 50_000] = 1.0  # a difference in the second chunk only
    sa, sb, sd = fp.buckets_and_norm(a)[0], fp.buckets_and_norm(a + d)[0], fp.buckets_and_norm(d)[0]
    assert torch.allclose(sb - sa, sd, rtol=1e-9, atol=1e-6)
    estimate = estimate_distance(tuple(sa.tolist()), tuple(sb.tolist()))
    assert 0.5 <= estimate / torch.linalg.vector_norm(d).item() <= 2.0


def _graph_nodes(loss):
    """Every node of `loss`'s backward graph, each once."""
    nodes, todo = [], [loss.grad_fn]
    while todo:
        n = todo.pop()
        if n is not None and n not in nodes:
            nodes.append(n)
            todo += [c for c, _ in n.next_functions]
    return nodes


def _hooked_prints(loss):
    """`loss`'s graph nodes and a PassPrints fed by a posthook on every one of them."""
    nodes = _graph_nodes(loss)
    prints = fp.PassPrints(nodes)
    for i, n in enumerate(nodes):
        n.register_hook(lambda gi, go, i=i, n=n: prints.node(i, n, go, gi))
    return nodes, prints


def _prints(fn):
    """Run a small model's backward with PassPrints fed by a posthook on every node."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(80, 70)
    x = torch.randn(3, 80)
    loss = fn(lin(x)).sum()
    nodes, prints = _hooked_prints(loss)
    with HostReads() as reads:
        loss.backward()
        event = prints.event(0)
    return nodes, event, reads.total, lin


def test_pass_prints_gather_grads_outputs_and_arguments_in_one_read():
    nodes, event, reads, lin = _prints(lambda h: torch.nn.functional.gelu(h, approximate="tanh").exp())
    names = [n.name() for n in nodes]
    by = {(p.node, p.dir, p.slot): p for p in event.prints}
    gelu, exp, addmm = names.index("GeluBackward0"), names.index("ExpBackward0"), names.index("AddmmBackward0")
    # exp saved its own result: its output; gelu's input (saved by gelu) is the linear's output.
    assert by[(exp, fp.OUTPUT, 0)].norm > 0 and not by[(exp, fp.OUTPUT, 0)].exact
    assert by[(addmm, fp.OUTPUT, 0)].what.startswith(f"saved by #{gelu}")
    assert "approximate='tanh'" in by[(gelu, fp.SAVED, -1)].what
    # the gradient the accumulator received is the weight's .grad, fingerprinted as it is (not
    # as the linear's TBackward0 received it, transposed: that is t's sent print)
    acc = next(i for i, n in enumerate(nodes) if hasattr(n, "variable") and n.variable is lin.weight)
    got = by[(acc, RECEIVED, 0)]
    assert math.isclose(got.norm, torch.linalg.vector_norm(lin.weight.grad).item(), rel_tol=1e-6)
    expected = fp.buckets_and_norm(lin.weight.grad)[0].tolist()
    assert all(math.isclose(x, y, rel_tol=1e-4, abs_tol=1e-5) for x, y in zip(got.sketch, expected))
    assert reads == 1, reads  # the whole pass in one host read


def test_prints_leave_gradients_as_torch_computes_them():
    """Fingerprinting changes no gradient (torch is the oracle)."""

    def plain():
        torch.manual_seed(0)
        lin = torch.nn.Linear(80, 70)
        torch.nn.functional.gelu(lin(torch.randn(3, 80))).exp().sum().backward()
        return lin.weight.grad, lin.bias.grad

    _, _, _, lin = _prints(lambda h: torch.nn.functional.gelu(h).exp())
    weight, bias = plain()
    assert torch.equal(lin.weight.grad, weight) and torch.equal(lin.bias.grad, bias)


def test_a_gradient_sent_and_received_is_sketched_once_and_a_replaced_one_again():
    """Where a node receives the very tensor its producer sent (or a view sends on what it
    received), the sketch is reused; a gradient a tensor hook replaced on the way is sketched
    anew. Every print equals the fingerprint of the value the hook saw (kept as a clone), except
    what ops that reorder elements (transpose, t) sent on: the print of what they received."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(80, 72)
    h = lin(torch.randn(3, 80))
    h.register_hook(lambda g: g * 2)  # replaced between the gelu's backward and the addmm's
    loss = torch.nn.functional.gelu(h).view(3, 8, 9).transpose(1, 2).exp().sum()
    nodes = _graph_nodes(loss)
    prints, seen = fp.PassPrints(nodes), {}

    def hook(gi, go, i):
        for d, grads in ((RECEIVED, go), (SENT, gi)):
            for slot, g in enumerate(grads):
                if isinstance(g, torch.Tensor):
                    seen[(i, d, slot)] = g.detach().clone()
        prints.node(i, nodes[i], go, gi)

    for i, n in enumerate(nodes):
        n.register_hook(lambda gi, go, i=i: hook(gi, go, i))
    loss.backward()
    event = prints.event(0)
    grads = [p for p in event.prints if p.dir in (RECEIVED, SENT)]
    assert len(grads) == len(seen)
    names = [n.name() for n in nodes]
    transpose, view = names.index("TransposeBackward0"), names.index("ViewBackward0")
    # a 3-D transpose, and a view from (3, 8, 9) to (3, 72) (another last dimension: another
    # 2-D form) send on the print they received; t's is its sent value's own (a matrix and its
    # transpose have one sketch)
    moved = {(transpose, SENT, 0): (transpose, RECEIVED, 0), (view, SENT, 0): (view, RECEIVED, 0)}
    for p in grads:
        key = (p.node, p.dir, p.slot)
        row = fp.read_rows([fp.fingerprint(seen[moved.get(key, key)])])[0]
        assert p.norm == row.norm and p.sketch == row.data, (names[p.node], p)
    # Reused: what exp, transpose, t and both accumulators received (each the tensor its producer
    # sent; the weight's: t's transpose of what addmm sent) and what transpose, view and t sent.
    # Sketched anew: what view received (sent reordered), what gelu received (view's is another
    # 2-D form), and addmm (gelu's gradient, replaced by the hook).
    values = [p for p in event.prints if p.slot != -1]
    assert prints.sketched == len(values) - 8, (prints.sketched, len(values))
    by = {(p.node, p.dir, p.slot): p for p in event.prints}
    addmm = names.index("AddmmBackward0")
    acc = next(i for i, n in enumerate(nodes) if hasattr(n, "variable") and n.variable is lin.weight)
    assert by[(acc, RECEIVED, 0)].sketch == by[(addmm, SENT, 2)].sketch  # the weight's gradient, once


def test_an_output_made_by_moving_elements_is_fingerprinted_as_those_elements():
    """A linear's `w.t()` (saved by its addmm when the input needs a gradient) is fingerprinted as
    `w` itself, read in order; a matrix and its transpose have one sketch, bit for bit."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(80, 70)
    x = torch.randn(3, 80, requires_grad=True)
    h = lin(x)
    loss = h.exp().sum()
    nodes, prints = _hooked_prints(loss)
    loss.backward()
    by = {(p.node, p.dir, p.slot): p for p in prints.event(0).prints}
    names = [n.name() for n in nodes]
    t_out = by[(names.index("TBackward0"), fp.OUTPUT, 0)]
    assert t_out.sketch == tuple(fp.buckets_and_norm(lin.weight.detach())[0].double().tolist())
    assert t_out.sketch == tuple(fp.buckets_and_norm(lin.weight.detach().t())[0].double().tolist())


def _encoder_prints():
    """A running Session with fingerprints, the list its PassPrints go to, and a seeded small
    encoder layer with its input."""
    from gradtui.engine.session import Session
    from gradtui.protocol import events as ev

    session = Session(full_stats=True, fingerprints=True)
    got: list = []
    session.add_listener(lambda e: got.append(e) if isinstance(e, ev.PassPrints) else None)
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0)
    session.run_on()
    return session, got, layer, torch.randn(2, 12, 16)


def _session_prints(every_node: bool, monkeypatch) -> dict:
    """The fingerprints of one seeded backward of a small encoder layer (views, transposes,
    selects, weights' accumulators) under a Session: on the hook plan (checked: its hooks were
    registered), or on every node (a breakpoint by place that never hits)."""
    from gradtui.engine.hooks import planned as planned_module

    plans = []
    register = planned_module.PlannedPass.register
    monkeypatch.setattr(planned_module.PlannedPass, "register", lambda self: (plans.append(self), register(self))[1])

    session, got, layer, x = _encoder_prints()
    if every_node:
        session.breakpoints.add(parse_spec("#9999"))
    session.install()
    try:
        layer(x).pow(2).mean().backward()
    finally:
        session.uninstall()
    [prints] = got
    assert bool(plans) != every_node  # the pass ran on the plan, or on every node
    return {(p.node, p.dir, p.slot): p for p in prints.prints}


def test_a_planned_pass_fingerprints_what_the_every_node_hooks_do(monkeypatch):
    """Fingerprints on the hook plan (posthooks on the nodes that compute only): the nodes that
    only move what they received (views, transposes, selects, accumulators) get the prints
    the every-node hooks give them, derived from their producer's, bit for bit; none is missing
    but where the every-node hooks sketched a moved gradient anew."""
    planned, every = _session_prints(False, monkeypatch), _session_prints(True, monkeypatch)
    assert planned and set(planned) <= set(every)
    assert all(planned[k] == every[k] for k in planned), [k for k in planned if planned[k] != every[k]]
    missing = set(every) - set(planned)
    assert len(missing) <= len(every) // 10, sorted(missing)


def _count_facts(monkeypatch, kept: int) -> list[int]:
    """Start the fingerprints' graph plans afresh with `kept` kept, and count (in the list's one
    item) the nodes whose facts are made from now on."""
    from collections import OrderedDict

    from gradtui.engine.fingerprints import plan as printplan

    monkeypatch.setattr(printplan, "_plans", OrderedDict())
    monkeypatch.setattr(printplan, "PLANS_KEPT", kept)
    made = [0]
    facts = printplan._facts
    monkeypatch.setattr(printplan, "_facts", lambda *a: (made.__setitem__(0, made[0] + 1), facts(*a))[1])
    return made


def _passes_prints(monkeypatch, kept: int) -> tuple[list[dict], list[int]]:
    """The fingerprints of four seeded backward passes of a small encoder layer under a Session,
    of two graphs (A, A, B, A: B another loss), with `kept` graph plans kept (0: each pass makes
    its own decisions, as before plans were kept), and how many nodes' facts each pass made."""
    made = _count_facts(monkeypatch, kept)
    session, got, layer, x = _encoder_prints()
    session.install()
    per_pass = []
    try:
        for loss in ("pow", "pow", "abs", "pow"):
            out = layer(x)
            before = made[0]
            (out.pow(2) if loss == "pow" else out.abs()).mean().backward()
            per_pass.append(made[0] - before)
            layer.zero_grad(set_to_none=True)
    finally:
        session.uninstall()
    assert len(got) == 4
    return [{(p.node, p.dir, p.slot): p for p in e.prints} for e in got], per_pass


def test_a_graph_s_decisions_are_made_once_and_print_what_each_pass_s_own_do(monkeypatch):
    """Fingerprints decide per node once per graph shape (gradtui.engine.fingerprints.plan): a pass of a
    graph seen before makes no node's facts again, and every pass's prints are, bit for bit,
    those of a pass that decided everything itself."""
    kept, made = _passes_prints(monkeypatch, kept=8)
    alone, made_alone = _passes_prints(monkeypatch, kept=0)
    assert kept[0] and kept == alone
    assert kept[0] == kept[1] == kept[3] and kept[2] != kept[0]
    first, again, other, back = made_alone
    assert first > 20 and again == back == first and other > 20, made_alone
    assert made == [first, 0, other, 0], (made, made_alone)


def test_a_small_value_s_fingerprint_is_its_values_and_norm_and_records_no_graph():
    """A value of at most EXACT_LIMIT elements is kept whole (as float32, or float64 for float64),
    with torch's norm of it, and, made under grad mode from a tensor that requires grad, neither
    requires grad (it is made from the detached value, with no `no_grad` block)."""
    generator = torch.Generator().manual_seed(5)
    for dtype in (torch.float32, torch.float64, torch.float16):
        value = torch.randn(4, 8, generator=generator).to(dtype).requires_grad_()
        with torch.enable_grad():
            row = sketch.python_fingerprint(value * 2)
        expected = (value.detach() * 2).reshape(-1).to(torch.float64 if dtype == torch.float64 else torch.float32)
        assert row.exact
        assert torch.equal(row.body, expected)
        assert torch.equal(row.norm, torch.linalg.vector_norm(expected))
        assert not row.body.requires_grad and not row.norm.requires_grad


_CHANGING = (
    ("pow", 3, False),
    ("pow", 3, False),
    ("pow", 3, True),
    ("abs", 3, False),
    ("pow", 2, False),
    ("pow", 3, False),
)
"""Passes of one encoder layer: (loss, batch, a hook on linear1's output doubling its gradient).
The hooked pass and the last smaller batch have the first pass's graph shape (so its cached
plan), with other values; the `abs` pass is another graph, whose
heads split and transposed twice leave a node no print reaches (its saved arguments read at the
pass's end)."""


def _changing_prints(
    monkeypatch, kept: int, every_node: bool = False
) -> tuple[list[tuple], list[int], list[torch.Tensor]]:
    """The prints of the `_CHANGING` passes under a Session, each event's prints in order, with
    `kept` graph plans kept (0: every pass decides everything itself), on the hook plan or on
    every node (nothing derived at the pass's end), how many nodes' facts each pass made, and
    the gradients the hook was given and gave."""
    made = _count_facts(monkeypatch, kept)
    session, got, layer, _ = _encoder_prints()
    if every_node:
        session.breakpoints.add(parse_spec("#9999"))
    x = torch.randn(3, 12, 16, generator=torch.Generator().manual_seed(1))
    per_pass: list[int] = []
    grads: list[torch.Tensor] = []

    def doubled(g: torch.Tensor) -> torch.Tensor:
        grads.extend((g.detach().clone(), g.detach() * 2))
        return g * 2

    session.install()
    try:
        for loss, batch, hooked in _CHANGING:
            hook = (
                layer.linear1.register_forward_hook(lambda m, i, o: (o.register_hook(doubled), None)[1])
                if hooked
                else None
            )
            out = layer(x[:batch])
            if hook is not None:
                hook.remove()
            before = made[0]
            (
                out.pow(2) if loss == "pow" else out.view(batch, 12, 2, 8).transpose(2, 3).transpose(1, 2).abs()
            ).mean().backward()
            per_pass.append(made[0] - before)
            layer.zero_grad(set_to_none=True)
    finally:
        session.uninstall()
    assert len(got) == len(_CHANGING)
    return [e.prints for e in got], per_pass, grads


def test_a_cached_plan_prints_what_a_pass_deciding_alone_does_as_the_graph_changes(monkeypatch):
    """The per-graph decisions (gradtui.engine.fingerprints.plan: facts, the nodes that save
    something) reused by passes whose values change under the same graph shape (a hooked
    tensor's gradient replaced, a last smaller batch) and across another graph give, event for
    event and print for print, what passes that decide everything themselves give, and what the
    every-node hooks give (which derive nothing at the pass's end); a plan kept past its graph,
    or a value-dependent choice kept in it, would not."""
    kept, made, (given, gave) = _changing_prints(monkeypatch, kept=8)
    alone, made_alone, _ = _changing_prints(monkeypatch, kept=0)
    every, _, _ = _changing_prints(monkeypatch, kept=0, every_node=True)
    assert [len(p) for p in kept] == [len(p) for p in alone] == [len(p) for p in every]
    for i, (mine, reference, hooked_all) in enumerate(zip(kept, alone, every)):
        assert mine == reference, (i, [(a, b) for a, b in zip(mine, reference) if a != b][:3])
        by_place = {(p.node, p.dir, p.slot): p for p in hooked_all}
        assert {(p.node, p.dir, p.slot): p for p in mine} == by_place, i
    assert made == [made_alone[0], 0, 0, made_alone[3], 0, 0], (made, made_alone)
    first = {(p.node, p.dir, p.slot): p for p in kept[0]}
    hooked = {(p.node, p.dir, p.slot): p for p in kept[2]}
    assert kept[0] == kept[1] and first.keys() == hooked.keys() and first != hooked  # the hook's gradient seen
    assert {(p.node, p.dir, p.slot) for p in kept[4]} <= first.keys() and kept[4] != kept[0]
    # torch's gradients around the hook: sent as given, received as the hook gave it (not reused)
    norms = {d: [p.norm for p in kept[2] if p.dir == d and p.norm] for d in (SENT, RECEIVED)}
    for direction, value in ((SENT, given), (RECEIVED, gave)):
        truth = torch.linalg.vector_norm(value).item()
        assert any(math.isclose(n, truth, rel_tol=1e-6) for n in norms[direction]), (direction, truth)


def test_a_plan_lists_the_nodes_that_save_something_of_its_own_graph(monkeypatch):
    """The nodes a pass's end visits for their saved arguments (`GraphPlan.with_saved`) are,
    for each graph shape alternated, those of that graph whose type saves something: made once
    per shape and reused, never another graph's."""
    from collections import OrderedDict

    from gradtui.engine.fingerprints import plan as printplan

    monkeypatch.setattr(printplan, "_plans", OrderedDict())
    w = torch.randn(6, 5, requires_grad=True)
    graphs = {
        "gelu": lambda: torch.nn.functional.gelu(w @ w.t(), approximate="tanh").exp().sum(),
        "select": lambda: (w.t().select(0, 2) * 3).tanh().sum() + w.sum(),
    }
    plans = {}
    for name in ("gelu", "select", "gelu", "select"):
        nodes = _graph_nodes(graphs[name]())
        plan = printplan.plan_for(printplan.graph_key(nodes, [()] * len(nodes)), len(nodes))
        assert plans.setdefault(name, plan) is plan
        expected = tuple(i for i, fn in enumerate(nodes) if printplan.saved_names(fn))
        assert plan.with_saved(nodes, {id(fn): i for i, fn in enumerate(nodes)}) == expected
    assert plans["gelu"] is not plans["select"]
