"""`--against REF.db` with a reference that cannot be compared with the run: said at once, in
one line naming it, never silently (`break differs>R` could then never stop): a recording of
another script, a pass the reference has no per-node data of, a damaged reference."""

from __future__ import annotations

import os
import shutil
import sqlite3

import pytest

from tests.helpers import script
from tests.processes import gradtui, record_with_fingerprints

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    folder = tmp_path_factory.mktemp("against")
    return {"loop": record_with_fingerprints(str(folder / "loop.db"), script("loop.py"), "2")}


def against(reference: str, name: str, *args: str):
    """`gradtui --headless --against REFERENCE -c 'break differs>0.01' -c continue NAME ARGS`."""
    return gradtui(
        "--headless", "--against", reference, "-c", "break differs>0.01", "-c", "continue", script(name), *args
    )


def notes(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("note: ")]


def test_a_reference_of_another_script_is_said_to_be_incomparable_once(references):
    run = against(references["loop"], "mlp.py", os.devnull)
    assert run.returncode == 0, run.stderr
    assert notes(run.stdout) == [
        f"note: the reference {references['loop']} cannot be compared with this run: no "
        "node of pass 0 matches one of its pass 0 (a different model or script?): "
        "`break differs` cannot stop"
    ], run.stdout


def test_the_first_pass_with_no_counterpart_says_so_once(references):
    run = against(references["loop"], "loop.py", "5")  # the reference has passes 0 and 1
    assert run.returncode == 0, run.stderr
    assert [line.startswith("pass 4 x.grad") for line in run.stdout.splitlines()].count(True) == 1
    assert notes(run.stdout) == [
        f"note: pass 2 has no counterpart in the reference {references['loop']} (it has no "
        "per-node data of pass 2): `break differs` cannot stop in it, nor in later passes "
        "without one"
    ], run.stdout
    lines = run.stdout.splitlines()
    assert lines.index(notes(run.stdout)[0]) > max(i for i, line in enumerate(lines) if line.startswith("pass 1 "))


def test_a_reference_whose_nodes_were_lost_is_said_to_be_incomparable(references, tmp_path):
    damaged = str(tmp_path / "no_nodes.db")
    shutil.copy(references["loop"], damaged)
    db = sqlite3.connect(damaged)
    db.execute("DELETE FROM nodes")
    db.commit()
    db.close()
    run = against(damaged, "loop.py", "2")
    assert run.returncode == 0, run.stderr
    assert notes(run.stdout) == [
        f"note: the reference {damaged} cannot be compared with this run: its pass 0 has "
        "no node recorded (damaged?): `break differs` cannot stop"
    ], run.stdout


def test_a_reference_missing_a_table_is_refused_before_the_run_in_one_line(references, tmp_path):
    damaged = str(tmp_path / "no_nodes_table.db")
    shutil.copy(references["loop"], damaged)
    db = sqlite3.connect(damaged)
    db.execute("DROP TABLE nodes")
    db.commit()
    db.close()
    run = against(damaged, "loop.py", "2")
    assert run.returncode == 2 and run.stdout == "", (run.stdout, run.stderr)
    assert run.stderr.count("\n") == 1 and damaged in run.stderr and "nodes table is missing" in run.stderr, run.stderr
    assert os.path.exists(damaged)
