"""A fatal signal that lands while a torchrun rank's job tap writes an event to the agent's server
(its lock held, on the script's thread) waits for that write: the last words, which say goodbye
through the same server, must not time out on a lock the main thread holds. Only the tap's long
waits (a diverge check's hold, the ranks' rendezvous) let a signal act at once.

In-process, with the agent as build_agent assembles it for a rank (WORLD_SIZE=2; torch.distributed
is not initialised, so the tap passes events straight to the server). SIGUSR1 stands for SIGTERM:
its handler asks the deferral first and then says the last words in a helper thread with a
deadline, as FatalSignals' does, without ending the test process."""

from __future__ import annotations

import signal
import socket
import threading

import pytest

from gradtui.agent.backlog import Backlog
from gradtui.agent.build import Transport, build_agent
from gradtui.engine.process.deferral import DEFERRAL
from gradtui.protocol import events as ev
from gradtui.protocol.options import RunOptions
from tests.helpers import script

pytestmark = pytest.mark.timeout(60)

LAST_WORDS_DEADLINE = 5.0
"""Seconds the stand-in last words may take (FatalSignals gives 3; generous under load)."""


@pytest.fixture
def rank_agent(monkeypatch):
    """A rank 0 agent (its tap in front of its server), this process's deferral armed as
    FatalSignals.install arms it; closed and disarmed after."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    listener = socket.create_server(("127.0.0.1", 0))
    agent = build_agent(RunOptions(script("chain.py")), Transport("token", listener), lambda: None)
    DEFERRAL.arm(True)
    yield agent
    DEFERRAL.arm(False)
    assert agent.server is not None
    agent.server.close("the test ended", timeout=0.1)
    listener.close()


@pytest.fixture
def last_words(rank_agent):
    """A SIGUSR1 handler standing for FatalSignals': deferred inside a write, else the last words
    (the server's goodbye) in a helper thread, joined with a deadline. `said` tells what happened."""
    said: list[str] = []
    server = rank_agent.server

    def goodbye() -> None:
        server.close("the script's process was killed by SIGTERM", timeout=0.1)

    def handler(signum: int, _frame: object) -> None:
        if DEFERRAL.defers(signum):
            said.append("deferred")
            return
        speaker = threading.Thread(target=goodbye, daemon=True)
        speaker.start()
        speaker.join(LAST_WORDS_DEADLINE)
        said.append("timed out" if speaker.is_alive() else "said in time")

    previous = signal.signal(signal.SIGUSR1, handler)
    yield said
    signal.signal(signal.SIGUSR1, previous)


def test_a_fatal_signal_in_the_taps_write_to_the_server_waits_for_it(rank_agent, last_words, monkeypatch):
    assert rank_agent.tap is not None
    add, fired = Backlog.add, []

    def signalled(self: Backlog, event: ev.Event) -> None:  # the server keeps it, under its lock
        if not fired:
            fired.append(True)
            signal.raise_signal(signal.SIGUSR1)  # its handler runs here: the server's lock held
        add(self, event)

    monkeypatch.setattr(Backlog, "add", signalled)
    rank_agent.session.emit(ev.Output("stdout", "loss 0.5\n"))
    assert last_words == ["deferred", "said in time"]  # acted on once the fan-out ended


class HoldingChecks:
    """A diverge check that holds the script at a pass's end (a signal comes while it does)."""

    def __init__(self) -> None:
        self.held: list[ev.Event] = []

    def on_event(self, event: ev.Event) -> None:
        if isinstance(event, ev.PassFinished):
            signal.raise_signal(signal.SIGUSR1)
            self.held.append(event)


def test_a_fatal_signal_during_a_diverge_hold_acts_at_once(rank_agent, last_words):
    assert rank_agent.tap is not None
    rank_agent.tap.checks = checks = HoldingChecks()
    rank_agent.session.emit(ev.PassFinished(0, 3, 3, None, None))
    assert last_words == ["said in time"]  # in the hold, as in the script's own code
    assert len(checks.held) == 1
