"""Recordings whose fingerprints are sketch 3 (the one-read sketch, gradtui.engine.fingerprints.sketch):
a run recorded twice agrees exactly, with and without the compiled library (its Python sketch gives
the same float32 numbers); one element of the input changed is seen where it enters; and
recordings of sketch 2 are never compared with sketch 3's by their fingerprints, in one line, while
two of sketch 2 still compare with each other."""

from __future__ import annotations

import shutil
import sqlite3

import pytest

from gradtui.record import schema
from gradtui.record.compare import compare
from tests.helpers import script
from tests.processes import gradtui, record_with_fingerprints

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sketch3")
    out = {}
    for name, variant in (("ref", ""), ("again", ""), ("nudge", "nudge")):
        out[name] = record_with_fingerprints(
            str(folder / f"{name}.db"), script("diff_model.py"), *([variant] if variant else [])
        )
    return out


def _prints(path: str) -> list[tuple]:
    db = sqlite3.connect(path)
    try:
        return db.execute(
            "SELECT pass, node, dir, slot, norm, exact, sketch, what FROM prints ORDER BY 1, 2, 3, 4"
        ).fetchall()
    finally:
        db.close()


def _sketch_version(path: str) -> int | None:
    db = sqlite3.connect(path)
    try:
        return schema.sketch_version(db)
    finally:
        db.close()


def test_a_run_recorded_twice_agrees_exactly_and_says_sketch_3(made):
    assert schema.SKETCH_VERSION == 3
    assert _sketch_version(made["ref"]) == _sketch_version(made["again"]) == 3
    assert _prints(made["ref"]) == _prints(made["again"])
    assert any(not row[5] for row in _prints(made["ref"]))  # values sketched, not only kept whole
    result = compare(made["ref"], made["again"], rtol=0.0)
    assert not result.differs and result.fingerprints == (True, True)


def test_a_run_recorded_without_the_compiled_library_agrees_exactly(made, tmp_path, monkeypatch):
    """GRADTUI_NATIVE=off: the Python hooks and the Python sketch 3; the same prints, bit for bit,
    as the run recorded with the compiled library where it is built."""
    monkeypatch.setenv("GRADTUI_NATIVE", "off")
    python = record_with_fingerprints(str(tmp_path / "python.db"), script("diff_model.py"))
    assert _sketch_version(python) == 3
    assert _prints(python) == _prints(made["ref"])
    assert not compare(made["ref"], python, rtol=0.0).differs


def test_one_element_of_the_input_changed_is_seen_where_it_enters(made):
    result = compare(made["ref"], made["nudge"])
    assert result.differs and result.inspected is not None and result.inspected.index == 0
    forward = result.inspected.forward
    assert forward is not None and forward.node_a.op == "AddmmBackward0" and forward.node_a.module == "fc1"
    assert forward.relative > 1e-6


def _as_sketch(path: str, version: int, folder) -> str:
    """A copy of the recording at `path` that says its fingerprints are of sketch `version`."""
    copy = folder / f"sketch{version}.db"
    shutil.copy(path, copy)
    db = sqlite3.connect(copy)
    db.execute("UPDATE sketch SET version = ?", (version,))
    db.commit()
    db.close()
    return str(copy)


def test_sketch_2_and_sketch_3_are_not_compared_and_say_so_in_one_line(made, tmp_path):
    old = _as_sketch(made["again"], 2, tmp_path)
    run = gradtui("diff", made["ref"], old)
    assert run.returncode == 2 and run.stdout == "", (run.stdout, run.stderr)
    assert len(run.stderr.strip().splitlines()) == 1
    assert "sketch 3" in run.stderr and "sketch 2" in run.stderr and "not comparable" in run.stderr
    run = gradtui("--headless", "--against", old, script("diff_model.py"))
    assert run.returncode == 2 and "sketch 2" in run.stderr and "record the reference again" in run.stderr, run.stderr
    assert not compare(old, old).differs  # two of sketch 2 still compare
