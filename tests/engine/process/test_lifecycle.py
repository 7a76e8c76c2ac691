"""Leaving cleanly: `quit` while paused or while the script runs ends the script thread within a
timeout and leaves no hook behind; after each pass nothing of gradtui keeps the graph alive."""

from __future__ import annotations

import gc

import pytest
import torch
from torch.nn.modules import module as nn_module

from gradtui.protocol import events as ev
from gradtui.protocol.commands import parse
from tests.helpers import output_of, run_headless, run_plain, script, torch_originals

pytestmark = pytest.mark.timeout(60)


def global_module_hooks() -> tuple[int, int]:
    return len(nn_module._global_forward_pre_hooks), len(nn_module._global_forward_hooks)


def test_quit_while_paused_ends_the_script_and_leaves_no_hooks(driven, stash):
    originals, module_hooks = torch_originals(), global_module_hooks()
    run = driven(script("retained.py"))
    run.next(ev.Paused)
    assert torch_originals() != originals  # patched while the script runs
    run.submit("quit")
    finished = run.join(timeout=10)
    assert finished.quit and finished.traceback is None and finished.passes == 1
    (pass_end,) = [e for e in run.events if isinstance(e, ev.PassFinished)]
    assert pass_end.error == "quit"
    assert "after backward" not in "".join(e.text for e in run.events if isinstance(e, ev.Output))
    assert torch_originals() == originals
    assert global_module_hooks() == module_hooks
    # The script's graph is still alive (retain_graph=True): a backward on it now runs no hook
    # of gradtui's (a leftover prehook would raise GradtuiQuit, the session is quitting).
    events_before = len(run.events)
    stash["z"].backward()
    assert torch.equal(stash["x"].grad, torch.tensor([36.0]))
    assert run.queue.empty() and len(run.events) == events_before
    assert run.report.to_json()["error"] == "quit"


def test_a_typed_quit_takes_the_runs_one_quit_path_and_a_stale_wake_runs_nothing(driven):
    run = driven(script("retained.py"))
    ways: list[str] = []
    run.session.run_quit.take(lambda: ways.append("way"))  # a mode's way out that does not stop (yet)
    run.next(ev.Paused)
    run.submit("quit")
    run.submit("print")  # still paused: the way decides when the session stops, not the session
    assert run.next(ev.CommandResult).command == "print" and ways == ["way"]
    run.session.run_quit.stop()
    run.session.run_quit.clear()  # as gradtui.listen() does: a wake-up left queued must not run a command
    run.submit("print")
    assert run.next(ev.CommandResult).command == "print"
    run.session.quit()
    finished = run.join(timeout=10)
    assert finished.quit and ways == ["way"]


def test_quit_from_headless_commands():
    run = run_headless(script("loop.py"), ["step", "quit"], ["3"])
    assert run.finished.quit
    assert run.where == [(0, 0), (0, 1)]
    assert "quit: the script was stopped" in run.output
    assert "pass 0 x.grad" not in output_of(run.events)


def test_quit_cannot_be_swallowed_by_except_exception(driven):
    run = driven(script("swallow.py"))
    run.next(ev.Paused)
    run.submit("q")
    finished = run.join(timeout=10)
    assert finished.quit
    output = "".join(e.text for e in run.events if isinstance(e, ev.Output))
    assert "swallowed" not in output and "went on" not in output


def test_quit_while_the_script_runs_a_long_forward_loop(driven):
    originals = torch_originals()
    run = driven(script("long_loop.py"))
    started = run.next(ev.Output)
    assert started.text == "looping\n"
    assert not run.session.paused
    assert run.runner.stop(timeout=10)  # True: the thread ended
    finished = run.next(ev.ScriptFinished, timeout=5)
    assert finished.quit and finished.passes == 0
    assert not run.thread.is_alive()
    assert torch_originals() == originals


def test_stop_before_start_and_after_end(driven):
    run = driven(script("chain.py"))
    run.next(ev.Paused)
    run.submit("continue")
    assert run.join().exit_status == 0
    assert run.runner.stop(timeout=1)  # nothing left to stop


def test_no_events_after_the_run_ended():
    run = run_headless(script("chain.py"), ["continue"])
    count = len(run.events)
    x = torch.ones(2, requires_grad=True)
    (x * 2).sum().backward()
    torch.autograd.grad((x * 3).sum(), [x])
    assert len(run.events) == count


def test_plain_torch_frees_the_intermediate(stash):
    """The oracle for the leak tests: without gradtui, h dies when its pass returns."""
    run_plain(script("leak.py"), ["2"])
    assert stash["alive"] == [False, False, False, False]


def test_no_graph_outlives_its_pass(stash):
    run = run_headless(script("leak.py"), ["continue"], ["3"])
    assert run.status == 0, run.output
    assert len(run.of(ev.PassStarted)) == 3
    # checked inside the script right after each pass, before and after gc.collect()
    assert stash["alive"] == [False] * 6
    gc.collect()
    assert all(ref() is None for refs in stash["refs"] for ref in refs)
    assert run.session and run.report and run.events  # all still held


def test_no_graph_outlives_its_pass_while_stepping(stash):
    run = run_headless(script("leak.py"), ["step", "step", "step", "step", "step", "step", "continue"], ["2"])
    assert run.status == 0, run.output
    assert stash["alive"] == [False] * 4


def test_a_failed_pass_caught_by_the_script_is_freed_without_gc(stash):
    run_plain(script("leak_error.py"))
    assert stash["alive"] == [False, False]  # the oracle: plain torch frees it by refcount
    stash.clear()
    run = run_headless(script("leak_error.py"), ["continue"])
    assert run.status == 0, run.output
    (pass_end,) = run.of(ev.PassFinished)
    assert pass_end.error == "RuntimeError: out of memory (pretend)"
    assert stash["alive"] == [False, False]


def test_previous_pass_is_freed_while_paused_in_the_next(driven, stash):
    run = driven(script("leak.py"), ["2"])
    first = run.next(ev.Paused)
    run.submit("break pass 1")
    assert run.result().ok
    run.submit("continue")
    second = run.next(ev.Paused)
    assert second.pass_index == 1
    gc.collect()
    refs = stash["refs"]
    assert len(refs) == 2
    # pass 0's graph is gone although the test holds its Paused event
    assert [ref() for ref in refs[0]] == [None, None, None]
    assert all(ref() is not None for ref in refs[1])  # pass 1's graph is running
    assert first.grads and second.grads
    run.submit("continue")
    assert run.join().exit_status == 0
    gc.collect()
    assert [ref() for ref in refs[1]] == [None, None, None]
    assert stash["alive"] == [False] * 4


def test_quit_frees_the_graph(driven, stash):
    run = driven(script("leak.py"), ["2"])
    run.next(ev.Paused)
    run.submit("quit")
    assert run.join(timeout=10).quit
    gc.collect()
    (refs,) = stash["refs"]
    assert [ref() for ref in refs] == [None, None, None]


def test_an_interruption_while_hooking_the_graph_leaves_no_hook(monkeypatch):
    """Ctrl-C (or a quit) may land while a node's hooks are being put on: a node gets them from
    the posthook of the first node before it, inside the engine, so the interruption ends the
    pass there. The hooks already on must come off too, or the graph keeps calling into a
    finished session."""
    import functools
    import types

    from gradtui.engine import session as session_module
    from gradtui.engine.hooks import everynode as hooks_module

    calls = []
    made = 0
    real = functools.partial

    def partial(fn, *args):
        nonlocal made
        made += 1
        if made == 3:  # the root's two hooks are on; the next node's are put on by its posthook
            raise KeyboardInterrupt
        hook = real(fn, *args)

        def counted(*hook_args):
            calls.append(args)
            return hook(*hook_args)

        return counted

    monkeypatch.setattr(hooks_module, "functools", types.SimpleNamespace(partial=partial, wraps=functools.wraps))
    session = session_module.Session(provenance=False)
    # Stepping: the pass pauses before its root, then runs it, and its posthook hooks the next node.
    session.add_listener(lambda event: session.submit(parse("step")) if isinstance(event, ev.Paused) else None)
    x = torch.tensor([2.0], requires_grad=True)
    z = ((x * 3) ** 2).sum()
    with session, pytest.raises(KeyboardInterrupt):
        z.backward(retain_graph=True)
    assert made == 3 and calls  # the root's hooks ran, then the interruption
    monkeypatch.undo()
    calls.clear()
    z.backward()
    assert calls == [] and torch.equal(x.grad, torch.tensor([36.0]))
