"""The agent assembled once (gradtui.agent.build): one validation of a run's options, one
builder, a typed line parsed once on its way to the session."""

from __future__ import annotations

import os

import pytest

from gradtui.agent.build import Transport, build_agent, path_checks
from gradtui.protocol import events as ev
from gradtui.protocol.commands import Quit, parse
from gradtui.protocol.options import OptionsError, PathChecks, RunOptions
from gradtui.protocol.stats import VALUES_LIMIT

pytestmark = pytest.mark.timeout(60)

FINE = PathChecks(recording=lambda path: None, reference=lambda path: None)


@pytest.mark.parametrize(
    ("options", "flags", "keywords"),
    [
        (
            RunOptions("s.py", record_every=2),
            "--record-every and --flight need --record DB",
            "record_every and flight need record=PATH",
        ),
        (RunOptions("s.py", fingerprints=True), "--fingerprints needs --record DB", "fingerprints needs record=PATH"),
        (
            RunOptions("s.py", record="r.db", record_every=2, flight=3),
            "use either --record-every or --flight, not both",
            "use either record_every or flight, not both",
        ),
        (RunOptions("s.py", record=""), "cannot record to : empty path", "cannot record to : empty path"),
        (
            RunOptions("s.py", record="r.db", report="r.db"),
            "cannot record to r.db: it is the --report path",
            "cannot record to r.db: it is the report path",
        ),
    ],
)
def test_validate_refuses_what_does_not_go_together_in_the_spelling_of_its_caller(options, flags, keywords):
    with pytest.raises(OptionsError) as by_flag:
        options.validate(FINE)
    assert str(by_flag.value) == flags
    with pytest.raises(OptionsError) as by_keyword:
        options.validate(FINE, keywords=True)
    assert str(by_keyword.value) == keywords


def test_validate_asks_the_recordings_layer_about_paths_and_makes_them_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    asked: list[str] = []
    checks = PathChecks(recording=lambda p: asked.append(p) or None, reference=lambda p: f"{p}: no fingerprints")
    run = RunOptions("s.py", record="run.db", report="out/r.json").validate(checks)
    assert run.record == str(tmp_path / "run.db") and run.report == str(tmp_path / "out" / "r.json")
    assert asked == [run.record] and (tmp_path / "out").is_dir()  # the report's folder is made
    with pytest.raises(OptionsError, match=r"^--against .*ref\.db: no fingerprints$"):
        RunOptions("s.py", against="ref.db").validate(checks)
    with pytest.raises(OptionsError, match=r"^against=.*ref\.db: no fingerprints$"):  # gradtui.listen(against=)
        RunOptions("s.py", against="ref.db").validate(checks, keywords=True)
    with pytest.raises(OptionsError, match="not a gradtui recording"):  # the real check: record/store's
        (tmp_path / "notes.txt").write_text("mine\n")
        RunOptions("s.py", record="notes.txt").validate(path_checks())


def test_the_flow_of_unhooked_passes_is_wanted_when_a_command_is_a_flow():
    def headless(*commands: str) -> RunOptions:
        return RunOptions("s.py", headless=True, commands=list(commands))

    assert headless("FLOW", "continue").flow_unhooked  # any spelling the grammar takes
    assert headless("continue", "  flow").flow_unhooked
    assert not headless("continue", "flow me", "flow 3", "flowing").flow_unhooked  # flow N: a recorded pass's
    assert RunOptions("s.py").flow_unhooked  # a UI shows it


def test_a_served_agent_runs_a_command_as_it_came_and_quits_by_its_own_path():
    quits: list[int] = []
    agent = build_agent(
        RunOptions(os.path.abspath("s.py"), break_on=["nan"]), Transport("token"), lambda: quits.append(1)
    )
    heard: list[ev.Event] = []
    agent.session.add_listener(heard.append)
    assert agent.server is not None and agent.commands is not None and agent.tap is None
    assert [str(bp) for bp in agent.session.breakpoints] == ["1: nan  (never hit)"]  # armed at build
    agent.commands.submit(parse("q"), 7)
    assert quits == [1]  # the mode's quit path, not the session's queue
    agent.session.submit(Quit("quit"))  # as a diverge hold or an in-process feeder would give it
    agent.commands.quit()  # the client's quit message
    assert quits == [1, 1, 1] and not agent.session.quitting  # one path: the mode's way stops the session
    agent.commands.submit(parse("delete 5"), 8)
    agent.commands.submit(parse("break MulBackward0"), 9)
    results = [e for e in heard if isinstance(e, ev.CommandResult)]
    assert [(r.request, r.ok) for r in results] == [(8, False), (9, True)]
    assert "no breakpoint 5" in results[0].text and results[1].command == "break MulBackward0"
    assert len(agent.session.breakpoints) == 2 and any(isinstance(e, ev.BreakpointsChanged) for e in heard)
    agent.outputs.close()


def test_headless_builds_no_server_and_arms_its_breakpoints():
    agent = build_agent(RunOptions("s.py", headless=True, break_on=["loss nan"]), None)
    assert agent.server is None and agent.commands is None
    assert [bp.spec.text for bp in agent.session.breakpoints] == ["loss nan"]
    agent.outputs.close()


def test_the_recording_and_the_report_read_the_flow_but_not_the_leaves_statistics(tmp_path):
    """They write a pass's flow; the leaves' gradients are their accumulators' rows: a headless
    run with only them computes no leaf statistics, one with a listener that reads them does."""
    options = RunOptions("s.py", headless=True, record=str(tmp_path / "run.db"), report=str(tmp_path / "r.json"))
    agent = build_agent(options, None)
    assert len(agent.outputs.listeners) == 2
    assert agent.session.wants_flow() and not agent.session.wants_leaves()
    agent.session.add_listener(lambda e: None)  # reads everything, leaves included
    assert agent.session.wants_leaves()
    agent.outputs.close()


def test_a_headless_run_computes_light_statistics_between_pauses_and_full_ones_at_a_pause(tmp_path):
    """Headless prints a pause's gradients only: the nodes that ran in `continue` carry the norm and
    the non-finite count (what the `nan` watch reads), not min/max/mean; the pause at the NaN has
    them all. A report still gets every statistic of every node."""
    import torch

    def run(options: RunOptions) -> list[ev.Event]:
        agent = build_agent(options, None)
        session, events = agent.session, []
        session.add_listener(events.append, batches=False)
        session.add_listener(lambda e: session.submit(parse("continue")) if isinstance(e, ev.Paused) else None)
        session.submit(parse("break nan"))
        session.run_on()
        torch.manual_seed(0)
        w = torch.randn(4 * VALUES_LIMIT, requires_grad=True)  # a small gradient keeps its values, in full
        with session:
            for value in (1.0, float("nan")):
                (w * w * value).sum().backward()
        agent.outputs.close()
        return events

    def ran_stats(events: list[ev.Event]) -> list:
        return [
            s
            for e in events
            if isinstance(e, ev.NodeRan)
            for s in (*e.grad_inputs, *e.grad_outputs)
            if s is not None and len(s.shape) == 1
        ]

    headless = run(RunOptions("s.py", headless=True))
    assert ran_stats(headless) and all(s.min is None and s.mean is None for s in ran_stats(headless))
    pause = next(e for e in headless if isinstance(e, ev.Paused))
    assert any(s is not None and s.min is not None for s in pause.grads)  # the pause is summarised in full
    reported = run(RunOptions("s.py", headless=True, report=str(tmp_path / "r.json")))
    finite = [s for s in ran_stats(reported) if not s.nonfinite]
    assert finite and all(s.min is not None and s.mean is not None for s in finite)
