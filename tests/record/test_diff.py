"""`gradtui diff`: where two recorded runs part, by subprocess runs of the CLI.

tests/fixtures/diff_model.py is recorded five times (its argument picks the variant): the
reference twice, with one gelu made `approximate="tanh"`, with a custom Function's backward
changed (its forward the same), and under bfloat16 autocast.
"""

from __future__ import annotations

import json
import sqlite3

import pytest

from gradtui.record import schema
from gradtui.record.compare import compare
from tests.helpers import script
from tests.processes import gradtui, record_with_fingerprints

pytestmark = pytest.mark.timeout(240)

GELU_LINE = next(i for i, line in enumerate(open(script("diff_model.py")), 1) if "approximate=approximate" in line)
SCALE_LINE = next(i for i, line in enumerate(open(script("diff_model.py")), 1) if "Scale.apply" in line)


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    folder = tmp_path_factory.mktemp("diff")
    made = {}
    for name, variant in (("ref", ""), ("again", ""), ("tanh", "tanh"), ("backward", "backward"), ("bf16", "bf16")):
        made[name] = record_with_fingerprints(
            str(folder / f"{name}.db"), script("diff_model.py"), *([variant] if variant else [])
        )
    return made


def diff(*args):
    return gradtui("diff", *args)


def test_same_seeded_script_recorded_twice_does_not_differ(recordings):
    run = diff(recordings["ref"], recordings["again"])
    assert run.returncode == 0, run.stdout + run.stderr
    assert "no pass differs" in run.stdout


def test_one_op_changed_names_that_op_and_its_line(recordings):
    run = diff(recordings["ref"], recordings["tanh"], "--json")
    assert run.returncode == 1, run.stderr
    found = json.loads(run.stdout)
    assert found["differs"] and found["pass"]["index"] == 0
    forward = found["pass"]["forward"]
    assert forward["node"]["op"] == "GeluBackward0"
    assert forward["node"]["source"] == f"diff_model.py:{GELU_LINE}"
    assert forward["arguments"] == "approximate='none' vs approximate='tanh'"
    assert found["pass"]["only_a"] == [] and found["pass"]["only_b"] == []
    text = diff(recordings["ref"], recordings["tanh"]).stdout
    assert f"first forward difference: #{forward['node']['id']} GeluBackward0 at diff_model.py:{GELU_LINE}" in text
    assert "gelu(self.fc2(h), approximate=approximate)" in text  # the source line itself


def test_every_op_before_the_changed_one_agrees(recordings):
    """In forward order, every node before the changed gelu has equal forward fingerprints (the
    first difference is not an artefact of the threshold)."""
    result = compare(recordings["ref"], recordings["tanh"], rtol=0.0)
    first = result.inspected.forward
    assert first.node_a.op == "GeluBackward0" and first.node_a.source == f"diff_model.py:{GELU_LINE}"
    db_a, db_b = (sqlite3.connect(recordings[k]) for k in ("ref", "tanh"))
    query = (
        "SELECT n.seq, p.dir, p.slot, p.sketch, p.what FROM prints p JOIN nodes n ON n.pass = p.pass AND "
        "n.id = p.node WHERE p.pass = 0 AND p.dir IN (2, 3) AND n.seq >= 0 AND n.seq < ? ORDER BY 1, 2, 3"
    )
    seq = db_a.execute("SELECT seq FROM nodes WHERE pass = 0 AND id = ?", (first.node_a.id,)).fetchone()[0]
    before_a, before_b = db_a.execute(query, (seq,)).fetchall(), db_b.execute(query, (seq,)).fetchall()
    assert before_a and before_a == before_b


def test_changed_backward_is_named_a_backward_only_difference(recordings):
    run = diff(recordings["ref"], recordings["backward"], "--json")
    assert run.returncode == 1, run.stderr
    found = json.loads(run.stdout)["pass"]
    assert found["index"] == 0 and found["forward"] is None
    assert found["backward_only"]["node"]["op"] == "ScaleBackward"
    assert found["backward_only"]["node"]["source"] == f"diff_model.py:{SCALE_LINE}"
    assert found["backward_only"]["value"] == "sent gradient"
    # 3g instead of 2g: the sent gradient's norm is 1.5 times the reference's, exactly
    assert found["backward_only"]["norm_b"] == pytest.approx(1.5 * found["backward_only"]["norm_a"], rel=1e-6)


def test_bad_input_is_one_line_and_status_2(recordings, tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_text("not a database")
    for args in (
        (recordings["ref"], str(junk)),
        (recordings["ref"], str(tmp_path / "missing.db")),
        (recordings["ref"], recordings["again"], "--pass", "99"),
    ):
        run = diff(*args)
        assert run.returncode == 2, (args, run.stdout, run.stderr)
        assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr


def test_a_version_1_recording_opens_without_fingerprints(recordings, tmp_path):
    """An older recording (no prints table, schema 1) still compares, by its gradients' recorded
    statistics: its forward is not compared, so a changed backward is named as where the
    gradients part, never as `backward-only` (that needs the forward known to agree)."""
    import shutil

    old = tmp_path / "old.db"
    shutil.copy(recordings["again"], old)
    db = sqlite3.connect(old)
    db.execute("DROP TABLE prints")
    db.execute("UPDATE schema_version SET version = 1")
    db.commit()
    db.close()
    result = compare(recordings["ref"], str(old))
    assert result.fingerprints == (True, False) and not result.differs
    result = compare(str(old), recordings["backward"])
    assert result.differs and not result.inspected.forward_compared and result.inspected.backward_only is None
    assert result.inspected.gradient.node_a.op == "ScaleBackward" and result.inspected.gradient_parts


def _sketch_1(path, tmp_path):
    """A copy of the recording at `path` as gradtui with the row-major sketch (schema 2, no
    `sketch` table) would have made it."""
    import shutil

    old = tmp_path / "sketch1.db"
    shutil.copy(path, old)
    db = sqlite3.connect(old)
    db.execute("DROP TABLE sketch")
    db.execute("UPDATE schema_version SET version = 2")
    db.commit()
    db.close()
    return str(old)


def test_fingerprints_of_another_sketch_are_refused_in_one_line(recordings, tmp_path):
    """A recording whose fingerprints were made by the old sketch is never compared with this
    sketch's: `diff` and `--against` say so in one line (status 2); two of the old sketch still
    compare with each other."""
    old = _sketch_1(recordings["again"], tmp_path)
    run = diff(recordings["ref"], old)
    assert run.returncode == 2 and run.stdout == "", (run.stdout, run.stderr)
    assert len(run.stderr.strip().splitlines()) == 1 and "sketch 1" in run.stderr
    assert f"sketch {schema.SKETCH_VERSION}" in run.stderr
    run = gradtui("--headless", "--against", old, script("diff_model.py"))
    assert run.returncode == 2 and "sketch 1" in run.stderr and "record the reference again" in run.stderr, run.stderr
    assert not compare(old, old).differs


def test_fingerprints_are_opt_in(tmp_path, capsys):
    """A plain --record costs what it did: fingerprints only with --fingerprints (which needs --record)."""
    from gradtui.agent.build import build_agent
    from gradtui.cli.main import main
    from gradtui.protocol.options import RunOptions

    for wanted in (False, True):
        agent = build_agent(RunOptions("s.py", record=str(tmp_path / f"r{wanted}.db"), fingerprints=wanted), None)
        assert agent.session.fingerprints is wanted
        agent.outputs.close()
    assert main(["--headless", "--fingerprints", script("diff_model.py")]) == 2
    assert "--fingerprints needs --record" in capsys.readouterr().err


def _against(ref, *args):
    return gradtui(
        "--headless",
        "-c",
        "break differs>1e-6",
        "-c",
        "continue",
        "-c",
        "print",
        "-c",
        "quit",
        "--against",
        ref,
        script("diff_model.py"),
        *args,
    )


def test_a_run_against_its_own_recording_stops_nowhere(recordings):
    run = _against(recordings["ref"])
    assert run.returncode == 0, run.stderr
    assert "breakpoint 1 at differs>1e-6" in run.stdout
    assert "breakpoint 1:" not in run.stdout and "differs from" not in run.stdout, run.stdout
    assert run.stdout.count("16/16 nodes ran") == 3  # every pass hooked, compared, and ran through


def test_a_run_against_the_reference_stops_where_the_forward_parts_and_prints_both_sides(recordings):
    """One gelu made approximate="tanh": the backward meets the ops after it first (their inputs
    differ, so they are passed over) and stops at that gelu, naming its arguments."""
    run = _against(recordings["ref"], "tanh")
    paused = [line for line in run.stdout.splitlines() if "breakpoint 1:" in line]
    assert len(paused) == 1, run.stdout
    assert paused[0].startswith("paused after #") and " GeluBackward0 · pass 0 " in paused[0], paused[0]
    assert "forward differs from ref.db: its arguments: approximate='tanh' vs approximate='none'" in paused[0], paused[
        0
    ]
    assert f"at diff_model.py:{GELU_LINE}" in run.stdout
    both = run.stdout.split("(gradtui) print", 1)[1].split("(gradtui)", 1)[0]
    assert "reference: #" in both and "GeluBackward0" in both
    assert "its forward output (saved by #" in both and " here, " in both and " there, apart " in both, both


def test_a_changed_custom_backward_stops_there_as_backward_only(recordings):
    run = _against(recordings["ref"], "backward")
    paused = [line for line in run.stdout.splitlines() if "breakpoint 1:" in line]
    assert len(paused) == 1 and " ScaleBackward · pass 0 " in paused[0], run.stdout
    assert "backward differs from ref.db: the gradient it sent (slot 0)" in paused[0]


def test_against_refuses_what_is_not_a_recording_or_has_no_fingerprints(tmp_path):
    bad = tmp_path / "not.db"
    bad.write_text("hello")
    run = gradtui("--headless", "--against", str(bad), script("diff_model.py"))
    assert run.returncode == 2 and "--against" in run.stderr and run.stdout == "", run.stderr
    plain = str(tmp_path / "plain.db")
    assert (
        gradtui("--headless", "--record-all", "-c", "continue", "--record", plain, script("diff_model.py")).returncode
        == 0
    )
    run = gradtui("--headless", "--against", plain, script("diff_model.py"))
    assert run.returncode == 2 and "no fingerprints to compare with" in run.stderr, run.stderr


def test_fp32_against_bf16_autocast_compares_gradients_through_the_casts(recordings):
    """Autocast puts casts between the weights and their transposes: a gradient's fingerprint does
    not depend on which ops made it, so each module's gradients differ by bf16's rounding (well
    under 5 %), not by a different order of the same elements."""
    run = diff(recordings["ref"], recordings["bf16"], "--json")
    assert run.returncode == 1, run.stderr
    found = json.loads(run.stdout)["pass"]
    assert {row["module"] for row in found["modules"]} >= {"fc1", "fc2", "out"}, found["modules"]
    for row in found["modules"]:
        assert 0 < row["gradient"] < 0.05, found["modules"]
    assert 0 < found["forward"]["relative"] < 0.05, found["forward"]


def test_a_value_recorded_on_one_side_only_is_named_so_never_inf(recordings):
    """Autocast saves a cast's output where fp32 saves the weight itself: that value is on one
    side only. The module table counts it (`one side only`), its numbers stay those of the
    values both sides hold, and `inf` is printed nowhere."""
    import re

    run = diff(recordings["ref"], recordings["bf16"])
    assert run.returncode == 1, run.stderr
    assert not re.search(r"\binf\b", run.stdout), run.stdout
    table = run.stdout.split("  module", 1)[1]
    assert "one side only" in table.splitlines()[0], run.stdout
    rows = json.loads(diff(recordings["ref"], recordings["bf16"], "--json").stdout)["pass"]["modules"]
    sided = [row for row in rows if row["one_side_only"]]
    assert sided, rows
    for row in rows:
        assert row["forward"] is None or isinstance(row["forward"], float), rows
        assert isinstance(row["gradient"], float), rows
