"""Fingerprints: the sketch's estimate of ‖a - b‖ and how a pass's values are gathered."""

from __future__ import annotations

import math

import torch

from gradtui.engine.fingerprints import sketch
from gradtui.engine.fingerprints import values as fp
from gradtui.protocol.breakpoints import parse_spec
from gradtui.protocol.fingerprints import estimate_distance
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
    got = by[(acc, fp.RECEIVED, 0)]
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
        for d, grads in ((fp.RECEIVED, go), (fp.SENT, gi)):
            for slot, g in enumerate(grads):
                if isinstance(g, torch.Tensor):
                    seen[(i, d, slot)] = g.detach().clone()
        prints.node(i, nodes[i], go, gi)

    for i, n in enumerate(nodes):
        n.register_hook(lambda gi, go, i=i: hook(gi, go, i))
    loss.backward()
    event = prints.event(0)
    grads = [p for p in event.prints if p.dir in (fp.RECEIVED, fp.SENT)]
    assert len(grads) == len(seen)
    names = [n.name() for n in nodes]
    transpose, view = names.index("TransposeBackward0"), names.index("ViewBackward0")
    # a 3-D transpose, and a view from (3, 8, 9) to (3, 72) (another last dimension: another
    # 2-D form) send on the print they received; t's is its sent value's own (a matrix and its
    # transpose have one sketch)
    moved = {(transpose, fp.SENT, 0): (transpose, fp.RECEIVED, 0), (view, fp.SENT, 0): (view, fp.RECEIVED, 0)}
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
    assert by[(acc, fp.RECEIVED, 0)].sketch == by[(addmm, fp.SENT, 2)].sketch  # the weight's gradient, once


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


def _passes_prints(monkeypatch, kept: int) -> tuple[list[dict], list[int]]:
    """The fingerprints of four seeded backward passes of a small encoder layer under a Session,
    of two graphs (A, A, B, A: B another loss), with `kept` graph plans kept (0: each pass makes
    its own decisions, as before plans were kept), and how many nodes' facts each pass made."""
    from collections import OrderedDict

    from gradtui.engine.fingerprints import plan as printplan

    monkeypatch.setattr(printplan, "_plans", OrderedDict())
    monkeypatch.setattr(printplan, "PLANS_KEPT", kept)
    made = [0]
    facts = printplan._facts
    monkeypatch.setattr(printplan, "_facts", lambda *a: (made.__setitem__(0, made[0] + 1), facts(*a))[1])
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
