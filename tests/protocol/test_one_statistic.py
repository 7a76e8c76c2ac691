"""One statistic: every `Stats` is made by gradtui.protocol.stats, from one description of the
fields that the factory, the recording's schema and the compiled posthooks follow by name.

The last test proves the contributor's promise in docs/contributing.md ("A statistic"): a copy of
gradtui with a throwaway statistic added in the factory, the schema and the detail pane only
records it, reads it back from the recording and shows it, with torch as the oracle.
"""

from __future__ import annotations

import ast
import inspect
import os
import pathlib
import re
import shutil
import sqlite3
import subprocess
import sys
import textwrap

import msgspec
import pytest

import gradtui
from gradtui.protocol.stats import Stats, full_stats
from gradtui.record import schema
from tests.helpers import patched_package

PACKAGE = pathlib.Path(gradtui.__file__).resolve().parent
NATIVE = PACKAGE / "engine" / "hooks" / "native"
FIELDS = Stats.__struct_fields__


def test_stats_is_constructed_in_one_module():
    """No module but gradtui.protocol.stats calls `Stats(...)` (each reads the factories)."""
    makers = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                if name == "Stats":
                    makers.add(str(path.relative_to(PACKAGE)))
    assert makers == {"protocol/stats.py"}


def test_the_factory_takes_every_field_by_its_name_in_the_structs_order():
    """`full_stats`'s parameters are the Stats fields (but `unreadable`, which `unreadable_stats`
    makes), in the struct's order: a positional call and a call by name make the same Stats."""
    params = list(inspect.signature(full_stats).parameters)
    assert params == [f for f in FIELDS if f != "unreadable"]
    values = {
        "shape": (2, 3),
        "dtype": "float32",
        "device": "cpu",
        "norm": 2.5,
        "min": -1.0,
        "max": 1.5,
        "mean": 0.25,
        "nonfinite": 0,
        "values": (-1.0, 0.0, 0.5, 1.0, 1.5, 0.0),
        "preview": (-1.0, 0.0),
        "histogram": (1, 2, 3),
        "finite_range": (-1.0, 1.5),
    }
    assert set(values) == set(params)
    by_name = full_stats(**values)
    assert by_name == full_stats(*(values[p] for p in params))
    assert all(getattr(by_name, name) == value for name, value in values.items())
    assert by_name.unreadable is None


def test_the_recording_keeps_every_field_or_says_why_not():
    """Each Stats field is a column of `grads` (schema.GRAD_STATS) or named in NOT_RECORDED with a
    reason; a fresh recording's `grads` has exactly those columns, of the types their kind says."""
    recorded = [c.field for c in schema.GRAD_STATS]
    assert len(set(recorded)) == len(recorded)
    assert set(recorded).isdisjoint(schema.NOT_RECORDED)
    assert set(recorded) | set(schema.NOT_RECORDED) == set(FIELDS)
    assert all(why for why in schema.NOT_RECORDED.values())
    db = sqlite3.connect(":memory:")
    db.executescript(schema.SCHEMA)
    columns = [(row[1], row[2]) for row in db.execute("PRAGMA table_info(grads)")]
    assert columns == [(k, "INTEGER") for k in schema.GRAD_KEY] + [(c.name, c.kept.sql) for c in schema.GRAD_STATS]


def test_a_file_made_without_a_statistic_reads_it_as_null():
    """The select list of a file whose `grads` lacks a later column names NULL in its place."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE grads (pass, node, dir, slot, shape, dtype, device, norm, min, max, nonfinite, vals)")
    listed = schema.grad_columns(db, "g.").split(", ")
    assert listed == [f"g.{c.name}" if c.name != "mean" else "NULL" for c in schema.GRAD_STATS]


def test_a_recording_without_a_column_reads_whole_with_that_statistic_none(tmp_path):
    """A recording whose `grads` lacks a column (as a file made before a statistic was added
    lacks its column) opens without damage, every other statistic as recorded, that one None."""
    import torch

    from gradtui.engine.session import Session
    from gradtui.record.reader import Recording
    from gradtui.record.store import Recorder

    db = str(tmp_path / "run.db")
    w = torch.randn(16, 16, requires_grad=True)
    session = Session(None, provenance=False, full_stats=True)
    recorder = Recorder(db)
    session.add_listener(recorder)
    session.run_on()
    with session:
        (w * w).sum().backward()
    recorder.close()
    with Recording(db) as rec:
        (index,) = [p.index for p in rec.passes()]
        whole = rec.stats(index)
    connection = sqlite3.connect(db)
    connection.execute("ALTER TABLE grads DROP COLUMN mean")
    connection.commit()
    connection.close()
    with Recording(db) as rec:
        older = rec.stats(index)
        assert rec.damage == []
    assert older.keys() == whole.keys() and whole
    for node, stats in whole.items():
        for a, b in zip(
            stats.grad_outputs + stats.grad_inputs, older[node].grad_outputs + older[node].grad_inputs, strict=True
        ):
            assert (a is None) == (b is None)
            if a is not None and b is not None:
                assert b.mean is None and a.mean is not None
                assert msgspec.structs.replace(a, mean=None) == b
    leaf = [s for n in whole.values() for s in n.grad_outputs if s is not None and s.shape == (16, 16)]
    assert any(s.max == (2 * w.detach()).max().item() for s in leaf)  # torch, the oracle


def test_the_compiled_posthooks_fill_the_factory_by_field_name():
    """records.h's MEASURED binds each name to the GradRec member of that name, each name a
    parameter of the factory, and posthooks.cpp calls the factory with those names as keywords
    (no positional format string)."""
    records = (NATIVE / "records.h").read_text(encoding="utf-8")
    cpp = (NATIVE / "posthooks.cpp").read_text(encoding="utf-8")
    table = re.search(r"constexpr Measured MEASURED\[\] = \{(.*?)\};", records, re.S)
    assert table is not None
    pairs = re.findall(r'\{"(\w+)", &GradRec::(\w+)\}', table.group(1))
    assert pairs and all(name == member for name, member in pairs)
    struct = re.search(r"struct GradRec \{(.*?)\};", records, re.S)
    assert struct is not None
    declared = set(re.findall(r"(\w+) = 0", struct.group(1)))
    names = [name for name, _ in pairs]
    assert set(names) <= declared
    assert set(names) <= set(inspect.signature(full_stats).parameters)
    fixed = re.search(r"const char\* fixed\[\] = \{(.*?)\};", cpp)
    assert fixed is not None
    assert re.findall(r'"(\w+)"', fixed.group(1)) == ["shape", "dtype", "device"]
    assert 'PyUnicode_InternFromString("nonfinite")' in cpp
    assert "PyObject_Vectorcall(obj->stats, args, 0, obj->stats_names)" in cpp
    assert "(NOOddddi)" not in cpp


def _measured_names() -> list[str]:
    """The names of records.h's MEASURED, in order."""
    records = (NATIVE / "records.h").read_text(encoding="utf-8")
    table = re.search(r"constexpr Measured MEASURED\[\] = \{(.*?)\};", records, re.S)
    assert table is not None
    return re.findall(r'\{"(\w+)", &GradRec::\w+\}', table.group(1))


def test_the_bulk_fetch_answers_by_field_name_from_the_one_compiled_measure():
    """The compiled bulk fetch (fetch.h) measures a wide tensor with records.h's `measure_wide`, the
    routine a posthook's big gradient is measured with, and answers a dict by name: "norm", each
    other name of MEASURED (each a parameter of the factory), "values". The Python read answers the
    same names, and the window reads them by name: nothing is read by its position in a flat list."""
    import torch

    from gradtui.engine.hooks import native
    from gradtui.engine.stats.measures import ONE_PASS
    from gradtui.engine.stats.window import fetch_in_python

    fetch = (NATIVE / "fetch.h").read_text(encoding="utf-8")
    records = (NATIVE / "records.h").read_text(encoding="utf-8")
    assert fetch.count("measure_wide(") == 1 and "amin" not in fetch and "aminmax" not in fetch
    assert records.count("measure_wide(") == 2  # its definition, and `measure`'s call
    assert "for (size_t k = 0; out && k < MEASURED_N; ++k)" in fetch
    window = (PACKAGE / "engine" / "stats" / "window.py").read_text(encoding="utf-8")
    assert "numbers[count" not in window.split("def fetch_in_python")[0]  # `_read_live` reads names
    names = _measured_names()
    expected = {"norm", "values", *names}
    assert set(names) - {"norm"} <= set(inspect.signature(full_stats).parameters)
    t = torch.randn(300)
    entries = [(0, t, t.numel())]
    small = [(1, torch.randn(5), 5)]
    by_python = fetch_in_python(entries, small, entries, [])
    assert set(by_python) == expected
    assert by_python["min"] == [t.min().item()] and by_python["max"] == [t.max().item()]
    assert by_python["mean"] == [t.sum().item() / 300] and by_python["values"] == small[0][1].tolist()
    compiled = native.load().module
    if compiled is not None:  # where built (the suite's conftest builds it)
        assert compiled.fetch([t], [t], [small[0][1]], ONE_PASS) == by_python


def test_the_compiled_posthooks_fill_the_light_tuples_in_their_fields_order():
    """A small gradient's `Listed` and a big one's `Normed` (named tuples Python reads by name, made
    into Stats only when read) are filled in C++ item by item: items 0 to 3 are their fields."""
    from gradtui.engine.stats.immediate import Listed, Normed

    cpp = (NATIVE / "posthooks.cpp").read_text(encoding="utf-8")
    assert Listed._fields == ("shape", "dtype", "values", "nonfinite")
    assert Normed._fields == ("shape", "dtype", "norm", "nonfinite")
    filled = re.findall(r"PyTuple_SET_ITEM\(made, (\d), (\w+)", cpp)
    assert filled == [("0", "shape"), ("1", "dtype"), ("2", "middle"), ("3", "PyLong_FromLong")]
    assert "middle = PyFloat_FromDouble(g.norm);" in cpp  # Normed's item 2


# The throwaway statistic's field and its factory parameter, the same whether derived or measured.
ABSMAX_FIELD = [
    (
        "    def reshaped(self, shape: tuple[int, ...]) -> Stats:\n",
        '    absmax: float | None = None\n    """The largest magnitude (a throwaway statistic)."""\n\n'
        "    def reshaped(self, shape: tuple[int, ...]) -> Stats:\n",
    ),
    (
        "    finite_range: tuple[float, float] | None = None,\n) -> Stats:\n",
        "    finite_range: tuple[float, float] | None = None,\n    absmax: float | None = None,\n) -> Stats:\n",
    ),
]

# The throwaway statistic: the largest magnitude, derived in the factory from min and max.
PATCHES = {
    "protocol/stats.py": [
        *ABSMAX_FIELD,
        (
            "    return Stats(shape, dtype, device, norm, min, max, mean, nonfinite, values, preview, histogram, None, finite_range)\n",
            "    if absmax is None and min is not None and max is not None:\n"
            "        absmax = abs(min) if abs(min) > abs(max) else abs(max)\n"
            "    return Stats(shape, dtype, device, norm, min, max, mean, nonfinite, values, preview, histogram, None, finite_range, absmax)\n",
        ),
    ],
    "record/schema.py": [
        (
            '    Column("vals", Kept.FLOATS, "values"),\n',
            '    Column("vals", Kept.FLOATS, "values"),\n    Column("absmax", Kept.REAL),\n',
        ),
    ],
    "ui/widgets/grad_stats.py": [
        (
            "    yield from _range(stats, hist, indent, width)\n",
            "    yield from _range(stats, hist, indent, width)\n"
            '    yield line(indent, ("absmax ", MUTED), format_number(stats.absmax))\n',
        ),
    ],
}
"""What a contributor writes to add a statistic: its field and its derivation in the factory, its
column, its line in the detail pane (three files, as docs/contributing.md says)."""

OLD_RUN = textwrap.dedent(
    """
    import sys
    import torch
    from gradtui.engine.session import Session
    from gradtui.record.store import Recorder

    x = torch.randn(16, 16, requires_grad=True)
    session = Session(None, provenance=False, full_stats=True)
    recorder = Recorder(sys.argv[1])
    session.add_listener(recorder)
    session.run_on()
    with session:
        (x * x).sum().backward()
    recorder.close()
    """
)
"""A recording made by this gradtui, before the throwaway statistic."""

RUN = textwrap.dedent(
    """
    import sys
    import torch
    from gradtui.engine.session import Session
    from gradtui.protocol.stats import Stats
    from gradtui.record.reader import Recording
    from gradtui.record.store import Recorder
    from gradtui.ui.widgets.grad_stats import grad_lines

    assert "absmax" in Stats.__struct_fields__, "the copy is not the one imported"
    db, old_db = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    w = torch.randn(16, 16, requires_grad=True)
    b = torch.randn(4, requires_grad=True)
    session = Session(None, provenance=False, full_stats=True)
    recorder = Recorder(db)
    session.add_listener(recorder)
    session.run_on()
    with session:
        ((w * w).sum() * 3.0 + (b * b).sum()).backward()
    recorder.close()
    expected = {(16, 16): w.grad.abs().max().item(), (4,): b.grad.abs().max().item()}  # torch's own
    with Recording(db) as rec:
        (index,) = [p.index for p in rec.passes()]
        found = {}
        for node in rec.stats(index).values():
            for s in node.grad_inputs + node.grad_outputs:
                if s is not None:
                    assert s.absmax == max(abs(s.min), abs(s.max)), s
                    found.setdefault(s.shape, set()).add(s.absmax)
        assert all(value in found[shape] for shape, value in expected.items()), (found, expected)
        some = [s for n in rec.stats(index).values() for s in n.grad_outputs if s is not None][0]
        shown = " ".join(c.plain for c in grad_lines(some, None, "", 80))
        assert f"absmax {some.absmax:.4g}" in shown, shown
    with Recording(old_db) as rec:  # made before the column was added: it reads whole (its cells
        (index,) = [p.index for p in rec.passes()]  # NULL, the factory derives the statistic again)
        old = [s for n in rec.stats(index).values() for s in n.grad_outputs if s is not None]
        assert old and not rec.damage, rec.damage
        assert all(s.absmax == max(abs(s.min), abs(s.max)) for s in old), old
    print("ok", found)
    """
)


@pytest.mark.timeout(300)
def test_a_statistic_added_in_three_files_is_recorded_read_back_and_shown(tmp_path):
    """The throwaway statistic, in a copy of gradtui patched in the three files only: a recorded
    pass keeps it (equal to torch's own abs().max() of the gradient), the reader gives it back,
    the detail pane prints it, and a file recorded before it existed still reads."""
    tree = patched_package(tmp_path, PATCHES)

    old_db = tmp_path / "old.db"  # recorded by this gradtui, without the statistic
    made = subprocess.run(
        [sys.executable, "-c", OLD_RUN, str(old_db)],
        env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert made.returncode == 0, made.stderr[-3000:]
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(tmp_path / "new.db"), str(old_db)],
        env={**os.environ, "PYTHONPATH": str(tree)},
        cwd=tmp_path,  # not this checkout's folder, which `python -c` would put first on the path
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok")


def test_the_compiled_table_names_the_norm_then_the_python_description():
    """records.h's MEASURED is the norm, then gradtui.engine.stats.measures's names in their order:
    the compiled and the Python reads measure the same statistics."""
    from gradtui.engine.stats.measures import NAMES

    assert _measured_names() == ["norm", *NAMES]


def test_the_python_reads_follow_the_description():
    """The summaries, the window and the planned hooks' reads name no measured statistic of their
    own: each takes them from gradtui.engine.stats.measures (its kernels, its generated factory
    calls), so a measured statistic is one line there."""
    from gradtui.engine.stats.measures import NAMES

    for name in ("summary.py", "window.py", "immediate.py"):
        text = (PACKAGE / "engine" / "stats" / name).read_text(encoding="utf-8")
        assert "full_stats" not in text, name
        assert not [n for n in NAMES if f'"{n}"' in text], name
        assert "total / numel" not in text, name  # the mean is a sum per element in the description
    for name in ("window.py", "immediate.py"):  # min and max too (summarize bins a histogram by them)
        assert "extremes(" not in (PACKAGE / "engine" / "stats" / name).read_text(encoding="utf-8"), name


# The throwaway measured statistic: the largest magnitude, measured on the tensor (torch's inf-norm
# in Python and in C++), not derived. What a contributor writes: the field and the factory's
# parameter, a line of the description with its Python kernel, the compiled table's line with its
# member and kernel, the column, the detail pane's line: five files.
MEASURED_PATCHES = {
    "protocol/stats.py": [
        *ABSMAX_FIELD,
        (
            "histogram, None, finite_range)\n",
            "histogram, None, finite_range, absmax)\n",
        ),
    ],
    "engine/stats/measures.py": [
        (
            '    Measure(("mean",), torch.sum, (Combine.SUM,), per_element=True),\n',
            '    Measure(("mean",), torch.sum, (Combine.SUM,), per_element=True),\n'
            '    Measure(("absmax",), partial(torch.linalg.vector_norm, ord=math.inf), (Combine.MAX,)),\n',
        ),
        ("import inspect\n", "import inspect\nimport math\nfrom functools import partial\n"),
    ],
    "engine/hooks/native/records.h": [
        (
            "  double norm = 0, min = 0, max = 0, mean = 0;\n",
            "  double norm = 0, min = 0, max = 0, mean = 0, absmax = 0;\n",
        ),
        ('    {"mean", &GradRec::mean},\n', '    {"mean", &GradRec::mean},\n    {"absmax", &GradRec::absmax},\n'),
        (
            "  out.mean = scalar(at::cpu::sum(g, at::IntArrayRef{})) / static_cast<double>(g.numel());\n",
            "  out.mean = scalar(at::cpu::sum(g, at::IntArrayRef{})) / static_cast<double>(g.numel());\n"
            "  out.absmax = scalar(at::cpu::linalg_vector_norm(g, INFINITY, c10::nullopt, false, c10::nullopt));\n",
        ),
    ],
    "record/schema.py": PATCHES["record/schema.py"],
    "ui/widgets/grad_stats.py": PATCHES["ui/widgets/grad_stats.py"],
}

MEASURED_RUN = textwrap.dedent(
    """
    import shutil, sys
    import torch
    from gradtui.engine.hooks import native
    from gradtui.engine.hooks.compiled import CompiledHooks
    from gradtui.engine.session import Session
    from gradtui.engine.stats.immediate import now_stats, quick_stats, resolved
    from gradtui.engine.stats.measures import ONE_PASS
    from gradtui.engine.stats.summary import CHUNK, summarize
    from gradtui.engine.stats.window import StatsWindow, fetch_in_python
    from gradtui.protocol.stats import VALUES_LIMIT, Stats
    from gradtui.record.reader import Recording
    from gradtui.record.store import Recorder
    from gradtui.ui.widgets.grad_stats import grad_lines

    assert "absmax" in Stats.__struct_fields__, "the copy is not the one imported"
    db = sys.argv[1]
    compiled = sys.argv[2] == "compiled"

    def oracle(t):
        return t.abs().max().item()  # torch's own, by another kernel than the statistic's

    torch.manual_seed(0)
    tensors = [torch.randn(300), torch.randn(20, 30).double().t(), torch.randn(40, 50) * 1e3]
    reached = set()
    for t in tensors:  # a pause's and a report's statistics, with and without a histogram
        assert summarize(t).absmax == oracle(t) == summarize(t, histogram=True).absmax
        assert now_stats(t, True).absmax == oracle(t)  # the planned hooks' reads
        assert resolved((quick_stats(t, True),))[0].absmax == oracle(t)
    reached.add("summarize, quick stats")
    big = torch.randn(CHUNK + 7)
    big[5] = -9.0
    assert summarize(big).absmax == oracle(big) == summarize(big, histogram=True).absmax == 9.0
    reached.add("chunked summarize")
    window = StatsWindow()
    handles = [window.add(t.contiguous(), light=False) for t in tensors]
    read = window.read()
    assert [read[h].absmax for h in handles] == [oracle(t) for t in tensors]
    wide = [(i, t.contiguous(), t.numel()) for i, t in enumerate(tensors)]
    assert fetch_in_python(wide, [], wide)["absmax"] == [oracle(t) for t in tensors]
    reached.add("window")

    if compiled:  # built from this copy's records.h, into the test's own cache
        module = native.load().module
        assert module is not None, native.load().reason
        got = module.fetch([t for _, t, _ in wide], [t for _, t, _ in wide], [], ONE_PASS)
        assert got["absmax"] == [oracle(t) for t in tensors], got
        reached.add("compiled fetch")
    else:
        CompiledHooks.available = staticmethod(lambda: None)  # the Python posthooks
    hooked = []
    register = CompiledHooks.register

    def counted(self, nodes, ids):
        left = register(self, nodes, ids)
        hooked.append(self.hooked())
        return left

    CompiledHooks.register = counted
    w = torch.randn(16, 16, requires_grad=True)
    b = torch.randn(100, requires_grad=True)
    session = Session(None, provenance=False, full_stats=True)
    recorder = Recorder(db)
    session.add_listener(recorder)
    session.run_on()
    with session:
        ((w * w).sum() * 3.0 + (b.exp() * b).sum()).backward()
    recorder.close()
    assert (sum(hooked) > 0) == compiled, hooked
    with Recording(db) as rec:
        (index,) = [p.index for p in rec.passes()]
        found = {}
        for node in rec.stats(index).values():
            for s in node.grad_inputs + node.grad_outputs:
                if s is not None and s.numel > VALUES_LIMIT:
                    assert s.absmax == max(abs(s.min), abs(s.max)), s
                    found.setdefault(s.shape, set()).add(s.absmax)
        assert oracle(w.grad) in found[(16, 16)] and oracle(b.grad) in found[(100,)], found
        some = [s for n in rec.stats(index).values() for s in n.grad_outputs if s is not None and s.numel > 64][0]
        shown = " ".join(c.plain for c in grad_lines(some, None, "", 80))
        assert f"absmax {some.absmax:.4g}" in shown, shown
    reached.add("compiled posthooks, recording" if compiled else "python posthooks, recording")
    print("ok", sorted(reached))
    """
)


@pytest.mark.timeout(900)
def test_a_measured_statistic_added_in_five_files_reaches_every_read(tmp_path):
    """A throwaway statistic measured on the tensor (not derived), added in a copy of gradtui in
    the five files docs/contributing.md lists, comes out of every read that makes a Stats, equal to
    torch's own: a pause's summary (chunked too), the quick and immediate reads, the bulk window
    and its Python fetch, the Python posthooks of a pass and, built from the copy where a compiler
    is, the compiled fetch and posthooks; the recording keeps it and the detail pane shows it."""
    tree = patched_package(tmp_path, MEASURED_PATCHES)
    env = {**os.environ, "PYTHONPATH": str(tree), "GRADTUI_CACHE": str(tmp_path / "cache")}
    modes = ["python"]
    if shutil.which("c++") or shutil.which("g++"):  # as the suite builds the compiled posthooks
        built = subprocess.run(
            [sys.executable, "-m", "gradtui.engine.hooks.native"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=840,
        )
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
        modes.append("compiled")
    for mode in modes:
        done = subprocess.run(
            [sys.executable, "-c", MEASURED_RUN, str(tmp_path / f"{mode}.db"), mode],
            env={**env, "GRADTUI_NATIVE": "use" if mode == "compiled" else "off"},
            cwd=tmp_path,  # not this checkout's folder, which `python -c` would put first on the path
            capture_output=True,
            text=True,
            timeout=840,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.startswith("ok"), done.stdout
        reads = ["summarize, quick stats", "chunked summarize", "window"]
        reads += ["compiled fetch", "compiled posthooks, recording"] if mode == "compiled" else []
        reads += ["python posthooks, recording"] if mode == "python" else []
        assert done.stdout.split(" ", 1)[1].strip() == repr(sorted(reads)), done.stdout
