"""What a user does with a recording besides replaying it: the sqlite3 queries docs/recording.md gives, run
against the acceptance recording (numbers checked against what torch printed in that run), and
`gradtui export DB --json PATH` (the report's shape, compact), with its bad input."""

from __future__ import annotations

import json
import math
import shutil
import sqlite3

import pytest

from gradtui.cli import export as export_cli
from gradtui.record.export import to_json
from gradtui.record.reader import Recording
from tests.processes import flight_recording, gradtui

pytestmark = pytest.mark.timeout(120)

CULPRIT = """
SELECT g.pass, n.id, n.op, n.source, n.module
FROM grads g JOIN nodes n ON n.pass = g.pass AND n.id = g.node
WHERE g.dir = 1 AND g.nonfinite > 0
  AND NOT EXISTS (SELECT 1 FROM grads i WHERE i.pass = g.pass AND i.node = g.node
                  AND i.dir = 0 AND i.nonfinite > 0)
ORDER BY g.pass, n.ord LIMIT 1
"""
"""docs/recording.md's query: the first node that sent on a non-finite gradient it did not receive."""

FIRST_NONFINITE = "SELECT min(pass) FROM flow WHERE nonfinite > 0"
"""docs/recording.md's query: the first pass in which a parameter's gradient was not finite."""

PARAM_NORM = "SELECT pass, grad_norm FROM flow WHERE name = '0.weight' ORDER BY pass"
"""docs/recording.md's query: a parameter's gradient norm over passes."""

LOSS_AND_NORM = "SELECT idx, losses, grad_norm, nonfinite FROM passes ORDER BY idx"
"""docs/recording.md's query: loss, global gradient norm and non-finite count per pass."""


@pytest.fixture(scope="module")
def db() -> str:
    made = flight_recording()
    assert made.run.returncode == 0, made.run.stderr[-2000:]
    return made.path


def printed_norms(db: str) -> dict[int, list[float]]:
    """Per step, the parameters' gradient norms as torch computed them in the script (its output)."""
    with Recording(db) as recording:
        text = "".join(line.text for line in recording.output())
    return {
        int(w[1]): [float(x) for x in w[3:]]
        for w in (line.split() for line in text.splitlines())
        if w and w[0] == "step"
    }


def number(x) -> float:
    """A REAL column as a float: NaN is stored as the text 'nan'."""
    return float(x)


def test_the_readme_queries_answer_on_a_real_recording(db):
    torch_norms = printed_norms(db)
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = connection.execute(PARAM_NORM).fetchall()
        assert [p for p, _ in rows] == list(range(40))
        for pass_, norm in rows:  # 0.weight is the first parameter the script prints
            expected = torch_norms[pass_][0]
            assert number(norm) == expected or (math.isnan(expected) and math.isnan(number(norm))), pass_
        assert connection.execute(FIRST_NONFINITE).fetchone()[0] == 30
        pass_, node, op, source, module = connection.execute(CULPRIT).fetchone()
        assert (pass_, op, source) == (30, "SqrtBackward0", "nan_at_30.py:17")
        assert connection.execute("SELECT pass, node FROM hits").fetchall() == [(30, node)]  # where the run stopped
        passes = connection.execute(LOSS_AND_NORM).fetchall()
        assert len(passes) == 40
        for idx, losses, total, nonfinite in passes:
            expected = math.sqrt(sum(n * n for n in torch_norms[idx]))
            if idx == 30:
                assert nonfinite > 0 and not math.isfinite(number(total))
            else:
                assert nonfinite == 0 and math.isclose(number(total), expected, rel_tol=1e-6)
            assert len(json.loads(losses)) == 1
    finally:
        connection.close()


def test_gradtui_export_writes_the_report_of_the_recording_compact(db, tmp_path):
    out, expected = tmp_path / "report.json", tmp_path / "expected.json"
    done = gradtui("export", db, "--json", str(out))
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert to_json(db, str(expected)) is None
    text = out.read_text(encoding="utf-8")
    assert "\n" not in text.strip() and ", " not in text[:2000]  # compact
    data = json.loads(text)
    assert data == json.loads(expected.read_text(encoding="utf-8"))
    assert [p["index"] for p in data["passes"]] == list(range(40))
    assert [p["index"] for p in data["passes"] if p["nodes"]] == [26, 27, 28, 29, 30]
    assert data["breakpoint_hits"][0]["pass"] == 30 and data["exit_status"] == 0


def test_export_bad_input_is_one_line_and_status_2(db, tmp_path, capsys):
    newer = tmp_path / "newer.db"
    shutil.copy(db, newer)
    connection = sqlite3.connect(newer)
    connection.execute("UPDATE schema_version SET version = 99")
    connection.commit()
    connection.close()
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database " * 20, encoding="utf-8")
    out = str(tmp_path / "out.json")
    cases = [
        ([str(tmp_path / "missing.db"), "--json", out], "no such file"),
        ([str(notes), "--json", out], "not a gradtui recording"),
        ([str(newer), "--json", out], "newer gradtui"),
        ([db, "--json", db], "is the recording itself"),
        ([db, "--json", str(tmp_path)], "it is a directory"),
        ([db, "--json", str(notes / "out.json")], "cannot write"),
        ([db, "--json", "/dev/full"], "No space left on device"),
    ]
    for argv, why in cases:
        assert export_cli.main(argv) == 2, argv
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and err.startswith("gradtui export: ") and why in err, err
    assert notes.read_text(encoding="utf-8") == "not a database " * 20
    with Recording(db) as recording:  # the recording itself was left alone
        assert len(recording.passes()) == 40
