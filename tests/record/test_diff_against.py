"""A live run against a reference recording (the CLI's and the notebook's entry points):
what it reads per node, `print`'s both sides at any pause, and `gradtui.listen(against=...)`."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest
import torch

from gradtui.engine.session import Session
from gradtui.protocol import events as ev
from gradtui.protocol.breakpoints import parse_spec
from gradtui.record.against import Reference
from gradtui.record.store import Recorder
from tests.helpers import REPO, HostReads, script
from tests.processes import PROCESS_TIMEOUT, gradtui, record_with_fingerprints

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """tests/fixtures/diff_model.py recorded with fingerprints, every pass per node."""
    return record_with_fingerprints(str(tmp_path_factory.mktemp("against") / "ref.db"), script("diff_model.py"))


def _model_pass(session: Session, approximate: str = "none") -> tuple[torch.Tensor, torch.Tensor]:
    """One seeded backward of a small MLP (its gelu `approximate`) under `session`; the weights' gradients."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(approximate=approximate), torch.nn.Linear(32, 4))
    session.run_on()
    session.install()
    try:
        net(torch.randn(8, 16)).pow(2).mean().backward()
    finally:
        session.uninstall()
    return net[0].weight.grad, net[2].weight.grad


def _host_reads(session: Session) -> int:
    """Host reads made by one pass under `session` (its gradients checked against torch's own)."""
    finished = []
    session.add_listener(lambda e: finished.append(e) if isinstance(e, ev.PassFinished) else None)
    with HostReads() as reads:
        grads = _model_pass(session)
    assert all(torch.equal(a, b) for a, b in zip(grads, _model_pass_plain()))  # compared, never changed
    [done] = finished
    assert done.done == done.total and done.error is None
    return reads.total


def _against(db: str, breakpoint: str | None) -> Session:
    session = Session(full_stats=True, fingerprints=True)
    session.against = Reference(db)
    if breakpoint is not None:
        session.breakpoints.add(parse_spec(breakpoint))
    return session


def test_a_pass_against_a_reference_reads_per_node_only_while_differs_is_armed(tmp_path, monkeypatch):
    """No `differs>R` armed: nothing asks after each node how far the runs are apart, so a pass
    against a reference makes the host reads of a recorded pass with fingerprints (both run on
    the hook plan; theirs come back in its one read at its end). `differs>R` armed: every node
    is hooked and each one's fingerprints are read back after it ran (the breakpoint is decided
    there): one read per node compared."""
    from gradtui.engine.fingerprints import values as fingerprint

    compared = []
    original = fingerprint.PassPrints._compare

    def counted(self, *args):
        with HostReads() as reads:
            found = original(self, *args)
        compared.append(reads.total)
        return found

    monkeypatch.setattr(fingerprint.PassPrints, "_compare", counted)
    db = str(tmp_path / "ref.db")
    recorder = Recorder(db)
    recording = Session(full_stats=True, fingerprints=True)
    recording.add_listener(recorder)
    recorder(ev.ScriptStarted("mlp", ()))
    recorded = _host_reads(recording)
    recorder.close()
    for armed in (None, "differs>1e-6"):
        live = _against(db, armed)
        try:
            reads = _host_reads(live)
        finally:
            live.against.close()
        if armed is None:
            assert reads == recorded and not compared, (reads, recorded, compared)
        else:
            assert len(compared) >= 8 and sum(compared) >= len(compared) - 1, compared


def _model_pass_plain() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    net(torch.randn(8, 16)).pow(2).mean().backward()
    return net[0].weight.grad, net[2].weight.grad


def test_print_at_a_pause_by_place_shows_both_sides(reference):
    """Without `differs`, a pause anywhere still shows the node's values here and in the
    reference (read when `print` asks)."""
    run = gradtui(
        "--headless",
        "-c",
        "break GeluBackward0",
        "-c",
        "continue",
        "-c",
        "print",
        "-c",
        "delete all",
        "-c",
        "continue",
        "--against",
        reference,
        script("diff_model.py"),
    )
    assert run.returncode == 0, run.stderr
    both = run.stdout.split("(gradtui) print", 1)[1].split("(gradtui)", 1)[0]
    assert "reference: #" in both and "GeluBackward0" in both, both
    assert " here, " in both and " there, apart 0" in both, both


LISTENS = textwrap.dedent("""\
    import runpy, sys
    import gradtui

    model, ref, db, variant = sys.argv[1:5]
    listening = gradtui.listen(against=ref, break_on="differs>1e-6", record=db, record_every=1)
    sys.argv = [model] + ([variant] if variant else [])
    runpy.run_path(model, run_name="__main__")
    listening.close()
    print("closed")
""")


def _listens(tmp_path, reference: str, variant: str) -> tuple[subprocess.Popen, str, dict]:
    path, db, runtime = tmp_path / "listens.py", str(tmp_path / f"live-{variant or 'same'}.db"), tmp_path / "run"
    path.write_text(LISTENS, encoding="utf-8")
    runtime.mkdir(mode=0o700)
    env = {
        **os.environ,
        "GRADTUI_RUNTIME_DIR": str(runtime),
        "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    process = subprocess.Popen(
        [sys.executable, str(path), script("diff_model.py"), reference, db, variant],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    return process, db, env


def _wait_entry(runtime, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + PROCESS_TIMEOUT
    while not any(runtime.iterdir()):
        assert time.monotonic() < deadline and process.poll() is None, "no agent wrote its runtime file"
        time.sleep(0.05)


def test_listen_against_a_reference_runs_through_and_records_its_own_fingerprints(tmp_path, reference):
    """The same seeded run in a process that calls gradtui.listen(against=...): nothing parts,
    so nothing pauses (no client needed), and its recording, with its own fingerprints, does
    not differ from the reference."""
    process, db, _ = _listens(tmp_path, reference, "")
    try:
        out, err = process.communicate(timeout=PROCESS_TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
    assert process.returncode == 0, err
    assert out.splitlines()[-1] == "closed"
    with sqlite3.connect(db) as con:
        assert con.execute("SELECT COUNT(DISTINCT pass) FROM prints").fetchone()[0] == 3
    run = gradtui("diff", reference, db)
    assert run.returncode == 0, run.stdout + run.stderr


def test_listen_against_stops_where_the_run_parts_for_a_client(tmp_path, reference):
    """One gelu changed: the process pauses at it (`differs>1e-6` from listen's break_on) and a
    client attached sees why and both sides."""
    process, _, env = _listens(tmp_path, reference, "tanh")
    try:
        _wait_entry(tmp_path / "run", process)
        # it stops once in each of the three passes: print, then run on without the breakpoint
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "gradtui",
                "attach",
                "--headless",
                "-c",
                "print",
                "-c",
                "delete all",
                "-c",
                "continue",
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=PROCESS_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
        out, err = process.communicate(timeout=PROCESS_TIMEOUT)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "GeluBackward0" in done.stdout and "forward differs from ref.db: its arguments" in done.stdout, done.stdout
    assert "reference: #" in done.stdout
    assert process.returncode == 0 and out.splitlines()[-1] == "closed", err


def test_listen_refuses_against_what_it_cannot_compare_with(tmp_path):
    import gradtui

    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n", encoding="utf-8")
    for bad in (notes, tmp_path / "missing.db"):
        with pytest.raises(ValueError, match="against="):
            gradtui.listen(against=str(bad))
    assert notes.read_text(encoding="utf-8") == "mine\n"


def test_fp32_against_bf16_autocast_stops_live_at_the_first_op_over_5_percent(tmp_path):
    """tests/fixtures/autocast_model.py: under bf16 autocast its first linear's output (a small
    difference of large terms) is ~30 % off, everything before it well under 5 %. Autocast adds
    casts on one side only (graph changes): an input made by a cast is compared with the
    reference's input in the same place, and a weight seen through its cast and transpose is a
    parameter, not a changed input. So `break differs>0.05` stops at that linear's addmm, as a
    forward difference, and not at the loss (whose gradient differs by about 5 % as well)."""
    ref = record_with_fingerprints(str(tmp_path / "fp32.db"), script("autocast_model.py"))
    run = gradtui(
        "--headless",
        "-c",
        "break differs>0.05",
        "-c",
        "continue",
        "-c",
        "delete all",
        "-c",
        "continue",
        "--against",
        ref,
        script("autocast_model.py"),
        "bf16",
    )
    assert run.returncode == 0, run.stderr
    paused = [line for line in run.stdout.splitlines() if "breakpoint 1:" in line]
    assert len(paused) == 1, run.stdout
    assert (
        " AddmmBackward0 · pass 0 " in paused[0]
        and "forward differs from fp32.db: its forward output by 0.2" in paused[0]
    ), paused[0]
    line = next(i for i, text in enumerate(open(script("autocast_model.py")), 1) if "second(torch" in text)
    assert f"at autocast_model.py:{line} in first:" in run.stdout.split(paused[0], 1)[1].splitlines()[1]


def _differences(db: str, approximate: str) -> ev.PassDifferences:
    """The PassDifferences of one pass of a small MLP (its gelu `approximate`) against `db`."""
    session = _against(db, None)
    got = []
    session.add_listener(lambda e: got.append(e) if isinstance(e, (ev.PassDifferences, ev.PassFinished)) else None)
    try:
        _model_pass(session, approximate)
    finally:
        session.against.close()
    assert [type(e) for e in got] == [ev.PassDifferences, ev.PassFinished]  # before the pass's end
    return got[0]


def test_a_pass_against_a_reference_sends_each_nodes_difference_in_one_event(tmp_path):
    """Against a reference, each pass ends with one PassDifferences: every matched node's
    forward and gradient difference and the pass's largest. Against its own recording all are
    0; with the gelu made `tanh`, the gelu's forward differs and so do the gradients from the
    loss down to it, while the first linear's forward (its output and weight) agrees."""
    db = str(tmp_path / "ref.db")
    recorder = Recorder(db)
    recording = Session(full_stats=True, fingerprints=True)
    recording.add_listener(recorder)
    recorder(ev.ScriptStarted("mlp", ()))
    _model_pass(recording)
    recorder.close()
    same = _differences(db, "none")
    assert same.reference == "ref.db" and same.only_here == 0 and len(same.nodes) >= 8
    assert same.largest == 0.0 and all(n.largest == 0.0 for n in same.nodes)
    changed = _differences(db, "tanh")
    names = {n.node: n for n in changed.nodes}
    assert changed.largest is not None and changed.largest > 1e-4
    gelu = next(n for n in changed.nodes if n.forward is not None and n.forward > 1e-4)
    assert gelu.gradient is not None and gelu.gradient > 1e-4
    assert sum(1 for n in names.values() if n.forward == 0.0) >= 2  # what came before it agrees
    assert changed.largest == max(n.largest for n in changed.nodes if n.largest is not None)


def test_the_reference_pass_is_what_a_pass_s_fingerprints_ask_for(reference):
    """The engine's fingerprints (which may not import record) ask their reference pass for what
    gradtui.protocol.fingerprints.PassAgainst declares; record's PassReference is that, method by
    method and parameter by parameter, and a live pass's reference is one."""
    import inspect

    from gradtui.protocol.fingerprints import PassAgainst
    from gradtui.record.against import PassReference

    for name in ("note", "check", "both_sides", "differences"):
        declared = inspect.signature(getattr(PassAgainst, name)).parameters
        made = inspect.signature(getattr(PassReference, name)).parameters
        assert list(made) == list(declared), name
        assert [p.default for p in made.values()] == [p.default for p in declared.values()], name
    session = _against(reference, None)  # another model than the reference's: no node matches
    seen = []
    session.add_listener(lambda e: seen.append(e) if isinstance(e, (ev.PassDifferences, ev.PassFinished)) else None)
    try:
        _model_pass(session)
    finally:
        session.against.close()
    differences, finished = seen
    assert differences.nodes == () and differences.only_here == finished.total > 0  # read through PassAgainst


def test_a_reference_s_passes_are_held_in_memory_as_it_is_made(reference, tmp_path, monkeypatch):
    """Made before the script runs, a Reference reads its passes with per-node data into memory:
    a pass compared with one of them reads nothing from the file in the user's backward (the
    file is gone by then here) and is matched node for node, value for value, as a pass read
    from the file then is (HELD_NODES 0: nothing held)."""
    import shutil

    from gradtui.protocol.nodes import NodeInfo
    from gradtui.record import against, compare

    path = str(tmp_path / "ref.db")
    shutil.copy(reference, path)
    side = compare.Side(path)
    per_node = sorted(side.per_node)
    infos = {  # a live pass of the same model: the reference's own nodes, as a capture describes them
        i: [
            NodeInfo(name=n.op, kind="op", seq=n.seq, next=(), param=n.param, source=n.source, module=n.module)
            for n in side.nodes(i)
        ]
        for i in per_node
    }
    side.close()
    held = Reference(path)
    assert len(per_node) >= 2 and held.held() == per_node
    monkeypatch.setattr(against, "HELD_NODES", 0)
    lazy = Reference(path)
    assert lazy.held() == []
    expected = {i: lazy.pass_reference(i, infos[i]) for i in per_node}
    lazy.close()
    os.remove(path)
    for i in per_node:
        got, want = held.pass_reference(i, infos[i]), expected[i]
        assert got is not None and want is not None and held.notice() is None, i
        assert len(got.matched) == len(infos[i]) > 0
        assert {k: (n.id, n.values) for k, n in got.matched.items()} == {
            k: (n.id, n.values) for k, n in want.matched.items()
        }
    assert held.pass_reference(max(per_node) + 1, infos[per_node[0]]) is None  # not held, and no file to read
    assert held.notice() is not None
    held.close()
