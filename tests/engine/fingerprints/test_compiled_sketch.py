"""The sign sketch made by the compiled posthooks (native/sketch.h, sketch 3 in one read) is the
Python sketch: bit for bit for every value sketched in float32 (its sums run in float64 and are
rounded once), to float64 rounding for a float64 value, on random values of every dtype, shape
and layout a pass meets (NaN and infinities included); its AVX2 loop and its scalar loop give the
same bits; it passes the Python sketch's accuracy tests, and a recorded pass's prints are the
same with it and without; where the library is not built, or a value is one it leaves to Python,
the Python sketch is made."""

from __future__ import annotations

import shutil

import pytest
import torch

from gradtui.engine.fingerprints import sketch
from gradtui.engine.hooks import native
from gradtui.engine.hooks.compiled import CompiledHooks
from gradtui.engine.session import Session
from gradtui.protocol import events as ev
from gradtui.protocol.fingerprints import estimate_distance
from tests.helpers import one_changed

MODULE = native.load().module
needs_build = pytest.mark.skipif(
    MODULE is None and shutil.which("c++") is None and shutil.which("g++") is None,
    reason="no C++ compiler here: the Python sketch is all there is",
)

DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32, torch.bool)
SHAPES = (
    (65,),
    (300,),
    (17, 5),
    (5, 17),
    (18, 18),
    (40, 40),
    (33, 7),
    (7, 33),
    (35, 9),
    (1, 70),
    (70, 1),
    (256, 256),
    (1024, 64),
    (64, 1024),
    (8, 32, 64),
    (3, 4, 5, 6),
)


def _kernel():
    """The compiled `sketch` (the library is built by tests/conftest.py where a compiler is)."""
    assert MODULE is not None, native.load().reason
    return MODULE.sketch


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bit for bit where numbers, NaN where NaN, of one dtype and shape."""
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(a.isnan(), b.isnan())
        and torch.equal(torch.nan_to_num(a, nan=0.0), torch.nan_to_num(b, nan=0.0))
    )


def _layouts(base: torch.Tensor) -> list[torch.Tensor]:
    """`base` as a pass meets it: contiguous, transposed (a weight's gradient), read through
    strides (a slice, a permuted 3-D value, heads split off its last dimension, a broadcast)."""
    out = [base]
    if base.dim() >= 2:
        out += [base.transpose(-1, -2), base.transpose(-1, -2).contiguous().transpose(-1, -2)]
    if base.shape[0] > 2:
        out.append(base[::2])
    if base.dim() >= 3:
        out.append(base.permute(2, 0, 1, *range(3, base.dim())))
    if base.dim() >= 2 and base.shape[-1] % 4 == 0:  # heads split: rows in runs, read in place
        out.append(base.view(*base.shape[:-1], 4, -1).transpose(-2, -3))
    if base.numel() <= 4096:  # broadcast: a zero stride, its rows read again
        out.append(base.expand(2, *base.shape))
    return [t for t in out if t.numel() > sketch.EXACT_LIMIT]


def _random(shape: tuple[int, ...], dtype: torch.dtype, g: torch.Generator, odd: bool) -> torch.Tensor:
    """A random value; `odd`: with NaN, +inf and -inf among its elements (a float dtype)."""
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if dtype == torch.int32:
        return torch.randint(-1000, 1000, shape, generator=g, dtype=dtype)
    t = (torch.randn(shape, generator=g, dtype=torch.float64) * 10.0 ** torch.randint(-3, 4, (), generator=g)).to(dtype)
    if odd:
        flat = t.view(-1)
        for at, value in zip(
            torch.randperm(flat.numel(), generator=g)[:3].tolist(), (float("nan"), float("inf"), -1e30)
        ):
            flat[at] = value if dtype in (torch.float32, torch.float64) or abs(value) != 1e30 else float("-inf")
    return t


def _agree(made: torch.Tensor, python: torch.Tensor, scale: torch.Tensor) -> bool:
    """Sketch 3's promise: bit for bit in float32; in float64 NaN where NaN, the same infinities,
    and the rest within 1e-12 of `scale`, the sum of the value's finite magnitudes (what bounds
    the rounding of two orders of float64 sums)."""
    if made.dtype != torch.float64:
        return _same(made, python)
    finite = made.isfinite()
    return (
        made.dtype == python.dtype
        and made.shape == python.shape
        and torch.equal(finite, python.isfinite())
        and torch.equal(made.isnan(), python.isnan())
        and torch.equal(made[made.isinf()], python[python.isinf()])
        and bool(((made[finite] - python[finite]).abs() <= 1e-12 * max(1.0, scale.item())).all())
    )


@needs_build
def test_the_compiled_sketch_is_the_python_sketch():
    """Every dtype, shape and layout above, with and without NaN and infinities: the compiled
    sketch and norm are torch.equal (NaN where NaN) to buckets_and_norm's where the value is
    sketched in float32, within float64 rounding for a float64 value; the AVX2 loop and the
    scalar loop give the same bits."""
    kernel = _kernel()
    g = torch.Generator().manual_seed(2024)
    checked = exact = 0
    try:
        for shape in SHAPES:
            for dtype in DTYPES:
                for odd in (False, True) if dtype.is_floating_point else (False,):
                    for t in _layouts(_random(shape, dtype, g, odd)):
                        MODULE.set_sketch_avx2(True)
                        made = kernel(t, sketch.grid_parts)
                        MODULE.set_sketch_avx2(False)
                        scalar = kernel(t, sketch.grid_parts)
                        assert made is not None and scalar is not None, (shape, dtype, t.stride())
                        assert _same(made[0], scalar[0]) and _same(made[1], scalar[1]), (shape, dtype, t.stride())
                        body, norm = sketch.buckets_and_norm(t)
                        real = t.double()
                        finite = real[real.isfinite()].abs().sum()
                        assert _agree(made[0], body, finite), (shape, dtype, t.stride(), made[0], body)
                        assert _agree(made[1], norm, finite), (shape, dtype, t.stride(), made[1], norm)
                        checked += 1
                        exact += _same(made[0], body) and _same(made[1], norm)
    finally:
        MODULE.set_sketch_avx2(True)
    assert checked > 300
    assert exact >= checked * 0.8  # every float32 one, and float64's where the orders round alike
    t = torch.randn(sketch.CHUNK, generator=g)  # the largest value it takes: one chunk
    made = kernel(t, sketch.grid_parts)
    assert made is not None and _same(made[0], sketch.buckets_and_norm(t)[0])


@needs_build
def test_fingerprint_uses_the_compiled_sketch_where_handed_in_and_python_elsewhere():
    """Handed in, `fingerprint` calls the compiled sketch for what it takes and gives the Python
    rows; a complex value, one of more than CHUNK elements, a view with its sign bit set (not a
    plain dense tensor) and a small one kept whole it leaves to Python (answering None), and
    their rows are the Python ones too."""
    kernel = _kernel()
    calls: list[torch.Size] = []

    def counted(t, grid_of):
        calls.append(t.shape)
        return kernel(t, grid_of)

    g = torch.Generator().manual_seed(9)
    values = (
        torch.randn(40, 50, generator=g),
        torch.randn(10, 20, generator=g, dtype=torch.complex64),
        torch.randn(sketch.CHUNK + 3, generator=g, dtype=torch.float64),
        torch.randn(8, 8, generator=g),
        torch.randn(30, 40, generator=g)._neg_view(),  # its sign bit: read through the dispatcher
    )
    previous = sketch.compiled()
    sketch.use_compiled(counted)
    try:
        rows = [(sketch.fingerprint(t), sketch.python_fingerprint(t)) for t in values]
    finally:
        sketch.use_compiled(previous)
    for row, python in rows:
        assert row.exact == python.exact and _same(row.body, python.body) and _same(row.norm, python.norm)
    assert calls == [values[0].shape, values[1].shape, values[2].shape, values[4].shape]  # the small one: never asked
    assert all(kernel(values[i], sketch.grid_parts) is None for i in (1, 2, 4))
    assert torch.equal(rows[4][0].body, sketch.python_fingerprint(values[4].clone()).body)  # the sign bit was read


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    """The estimate of ‖a - b‖ / max(‖a‖, ‖b‖) from two compiled sketches alone."""
    kernel = _kernel()
    (sa, na), (sb, nb) = kernel(a, sketch.grid_parts), kernel(b, sketch.grid_parts)
    scale = max(na.item(), nb.item())
    return estimate_distance(tuple(sa.tolist()), tuple(sb.tolist())) / scale


def _exact(a: torch.Tensor, b: torch.Tensor) -> float:
    return (torch.linalg.vector_norm(a - b) / max(torch.linalg.vector_norm(a), torch.linalg.vector_norm(b))).item()


@needs_build
def test_the_compiled_sketch_estimates_within_a_factor_of_two():
    """The 1,000 random pairs of the Python sketch's accuracy test (shapes and scales varied,
    seeded): the estimate from two compiled sketches is within 2x of the exact relative distance
    on at least 95 %."""
    g = torch.Generator().manual_seed(1234)
    within = 0
    for i in range(1000):
        shape = ((3 + i % 7) * 11, 2 + i % 5)
        a = torch.randn(shape, generator=g, dtype=torch.float64)
        scale = 10.0 ** float(torch.empty(()).uniform_(-6, 0, generator=g))
        b = a + scale * torch.randn(shape, generator=g, dtype=torch.float64)
        within += 0.5 <= _relative(a, b) / _exact(a, b) <= 2.0
    assert within >= 950, within


@needs_build
@pytest.mark.parametrize("kind", ["element", "row", "column"])
def test_one_changed_element_row_or_column_is_seen(kind):
    """One element, row or column of a random model-sized value changed: the compiled sketches
    always see it (a non-zero estimate), and estimate it within 2x on most trials."""
    g = torch.Generator().manual_seed(7)
    seen = within = 0
    trials = 40
    for i in range(trials):
        a, b = one_changed(((256, 256), (8, 32, 256), (1024, 64))[i % 3], kind, g)
        estimate = _relative(a, b)
        seen += estimate > 0
        within += 0.5 <= estimate / _exact(a, b) <= 2.0
    assert seen == trials
    assert within >= 0.8 * trials, within


def _recorded_pass(model: torch.nn.Module, x: torch.Tensor) -> tuple[list[ev.Print], list[ev.NodeRan], list]:
    """One fingerprinted pass of `model` on `x` (planned hooks, the session's own): its prints,
    its NodeRan events in the order the nodes ran, and the parameters' gradients."""
    events: list[ev.Event] = []
    session = Session(events.append, full_stats=True, fingerprints=True)
    session.run_on()
    session.install()
    try:
        model(x).pow(2).mean().backward()
    finally:
        session.uninstall()
    grads = [p.grad for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    (prints,) = [e for e in events if isinstance(e, ev.PassPrints)]
    ran = sorted((e for e in events if isinstance(e, ev.NodeRan)), key=lambda e: e.order)
    return sorted(prints.prints, key=lambda p: (p.node, p.dir, p.slot)), ran, grads


def _recorded_prints(model: torch.nn.Module, x: torch.Tensor) -> list[ev.Print]:
    """The prints of one fingerprinted pass of `model` on `x`."""
    return _recorded_pass(model, x)[0]


def _encoder() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True), 2, enable_nested_tensor=False
    )


@needs_build
def test_a_pass_records_the_same_prints_with_the_compiled_sketch_and_without(monkeypatch):
    """A small encoder's fingerprinted pass, once with the compiled sketch handed in (the
    session's own choice where built) and once with the Python sketch alone: the same prints,
    value for value, and the compiled one was used."""
    model = _encoder()
    x = torch.randn(4, 8, 32)
    calls = [0]
    kernel = _kernel()

    def counted(t, grid_of):
        calls[0] += 1
        return kernel(t, grid_of)

    monkeypatch.setattr(native.load().module, "sketch", counted, raising=False)
    compiled = _recorded_prints(model, x)
    assert calls[0] > 10
    monkeypatch.setattr(CompiledHooks, "available", staticmethod(lambda: None))  # not built, as it were
    python = _recorded_prints(model, x)
    assert sketch.compiled() is None
    assert len(compiled) == len(python) > 50
    for a, b in zip(compiled, python):
        assert (a.node, a.dir, a.slot, a.exact, a.what) == (b.node, b.dir, b.slot, b.exact, b.what)
        assert a.norm == b.norm and a.sketch == b.sketch, (a, b)


@needs_build
def test_a_fingerprinted_pass_runs_on_the_compiled_posthooks_as_on_the_python_ones(monkeypatch):
    """A fingerprinted pass on the hook plan puts the compiled posthooks on its nodes (they hand
    each node they measure to its fingerprints, once): the same prints, value for value, the same
    NodeRan events in the same order with the same statistics, and torch's gradients, as the
    same pass on the Python posthooks alone."""
    from tests.helpers import compiled_hooked
    from tests.helpers import same_stats as _same_stats

    model = _encoder()
    x = torch.randn(4, 8, 32)
    hooked = compiled_hooked(monkeypatch)
    prints, ran, grads = _recorded_pass(model, x)
    assert len(hooked) == 1 and hooked[0] > 10  # the compiled posthooks ran this pass
    monkeypatch.setattr(CompiledHooks, "available", staticmethod(lambda: None))  # the Python posthooks
    python, python_ran, python_grads = _recorded_pass(model, x)
    assert len(hooked) == 1
    assert len(prints) == len(python) > 50
    for a, b in zip(prints, python):
        assert a == b, (a, b)
    assert [(e.node, e.order) for e in ran] == [(e.node, e.order) for e in python_ran]
    for a, b in zip(ran, python_ran):
        assert all(_same_stats(u, v) for u, v in zip(a.grad_inputs, b.grad_inputs, strict=True)), a.node
        assert all(_same_stats(u, v) for u, v in zip(a.grad_outputs, b.grad_outputs, strict=True)), a.node
    assert all(torch.equal(a, b) for a, b in zip(grads, python_grads, strict=True))
