"""A torchrun rank under gradtui ends as a plain torchrun rank ends (the exit table, its
torchrun rows; tests/cli/test_exits.py holds the headless, UI and --listen rows).

One rank of a 2-rank job (`torchrun -m gradtui --listen :0 SCRIPT`, parked at its first pause)
gets SIGINT, SIGTERM or SIGHUP, or both ranks raise KeyboardInterrupt in a tensor hook once a
client lets them run: torchrun's exit status, and the exit code torchrun reports for the rank
that failed first, equal those of a plain `torchrun SCRIPT` ended the same way; the job's
runtime file is gone. Every job is killed in a finalizer.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import pytest

from gradtui.protocol.commands import parse
from tests.helpers import script
from tests.processes import Job, JobClient, children, descendants, gone, torchrun

pytestmark = pytest.mark.timeout(300)

TIMEOUT = 120.0
CASES = {
    "SIGINT": (signal.SIGINT, "sleeps.py"),
    "SIGTERM": (signal.SIGTERM, "sleeps.py"),
    "SIGHUP": (signal.SIGHUP, "sleeps.py"),
    "KeyboardInterrupt": (None, "hook_interrupts.py"),
}
"""What ends the job (a signal to rank 1 once both ranks printed `ready`, or nothing: the
script raises in a hook) and the script each rank runs."""

FAILED = re.compile(r"failed \(exitcode: (-?\d+)\) local_rank: (\d+)")


class Ending(NamedTuple):
    """How a job ended: torchrun's status and the exit code of the rank it names as failed first."""

    status: int
    rank_code: int


def _ending(job: Job, status: int) -> Ending:
    found = FAILED.search(job.output())
    assert found, job.output()
    return Ending(status, int(found.group(1)))


def _rank(job: Job, rank: int) -> int:
    """The pid of the job's rank `rank` (torchrun's child whose environment says RANK=rank)."""
    for pid in children(job.proc.pid):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ:
            return pid
    raise AssertionError(f"no rank {rank} below torchrun:\n{job.output()}")


def _wait_ready(job: Job, ranks: int = 2) -> None:
    deadline = time.monotonic() + TIMEOUT
    while job.output().count("ready") < ranks:
        assert job.proc.poll() is None, job.output()
        assert time.monotonic() < deadline, f"never ready:\n{job.output()}"
        time.sleep(0.05)


def _end(argv: list[str], case: str, runtime: Path, at_ready=lambda job: None) -> Ending:
    signum, _ = CASES[case]
    job = Job(argv, runtime)
    try:
        _wait_ready(job)
        at_ready(job)
        if signum is not None:  # under gradtui rank 1 is parked at its first pause by then
            time.sleep(1.0)  # `ready` is printed just before the backward that pauses
            os.kill(_rank(job, 1), signum)
        return _ending(job, job.wait(TIMEOUT))
    finally:
        job.end()


_plain: dict[str, Ending] = {}


def plain(case: str, tmp_path: Path) -> Ending:
    """A plain torchrun job ended by `case`: the oracle (once per case)."""
    if case not in _plain:
        _plain[case] = _end(torchrun(script(CASES[case][1])), case, tmp_path / "plain")
    return _plain[case]


@pytest.mark.parametrize("case", CASES)
def test_a_rank_under_gradtui_ends_as_a_plain_rank(case, tmp_path):
    runtime = tmp_path / "rt"

    def let_it_run(job: Job) -> None:  # a client continues both ranks into the raising hook
        if CASES[case][0] is None:
            job.agent()
            attached = subprocess.run(
                [sys.executable, "-m", "gradtui", "attach", "--headless", "-c", "continue"],
                capture_output=True,
                text=True,
                timeout=TIMEOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "GRADTUI_RUNTIME_DIR": str(runtime)},
            )
            assert "KeyboardInterrupt" in attached.stdout + attached.stderr, attached

    ending = _end(
        torchrun("-m", "gradtui", "--listen", "127.0.0.1:0", script(CASES[case][1])), case, runtime, let_it_run
    )
    assert ending == plain(case, tmp_path)
    assert ending.rank_code < 0
    assert list(runtime.glob("agent-*.json")) == []


SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGHUP": signal.SIGHUP}
LOOP = "ready_loop.py"
"""Prints `ready`, then backward passes until killed, printing `step N` after each."""
END_WAIT = 15.0
"""Seconds every rank has to be gone once torchrun has returned."""

_plain_loop: dict[tuple[int, int], Ending] = {}


def _steps(job: Job) -> int:
    return job.output().count("step ")


def _signal_rank(argv: list[str], signum: int, rank: int, runtime: Path, at_ready=lambda job: None) -> Ending:
    """Start the job, bring it where `at_ready` leaves it once both ranks are ready, send `signum`
    to rank `rank`: how the job ended. Every process of the job is gone afterwards (checked)."""
    job = Job(argv, runtime)
    try:
        _wait_ready(job)
        at_ready(job)
        ranks = [_rank(job, 0), _rank(job, 1), *descendants(job.proc.pid)]
        os.kill(_rank(job, rank), signum)
        ending = _ending(job, job.wait(TIMEOUT))
        deadline = time.monotonic() + END_WAIT
        while not all(gone(pid) for pid in ranks):
            assert time.monotonic() < deadline, f"left running: {[p for p in ranks if not gone(p)]}\n{job.output()}"
            time.sleep(0.1)
        return ending
    finally:
        job.end()


def plain_loop(signum: int, rank: int, tmp_path: Path) -> Ending:
    """A plain torchrun job of the loop, rank `rank` sent `signum` while it runs: the oracle."""
    if (signum, rank) not in _plain_loop:

        def running(job: Job) -> None:
            seen = _steps(job)
            deadline = time.monotonic() + TIMEOUT
            while _steps(job) < seen + 4:  # both ranks past their first passes
                assert time.monotonic() < deadline and job.proc.poll() is None, job.output()
                time.sleep(0.05)

        _plain_loop[signum, rank] = _signal_rank(torchrun(script(LOOP)), signum, rank, tmp_path / "plain", running)
    return _plain_loop[signum, rank]


SIGNAL_CASES = [
    ("SIGINT", 0, "paused"),
    ("SIGINT", 1, "running"),
    ("SIGTERM", 1, "paused"),
    ("SIGTERM", 0, "running"),
    ("SIGHUP", 0, "paused"),
    ("SIGHUP", 1, "running"),
    ("SIGINT", 1, "stepping"),
    ("SIGTERM", 0, "stepping"),
    ("SIGHUP", 0, "stepping"),
]
"""Every pair of (signal, rank), (signal, state) and (rank, state) once: each case starts two
torchrun jobs (gradtui's and the plain baseline), so the twelve combinations would cost the suite a
worker for three minutes for what six of them already tell apart."""


@pytest.mark.parametrize(("name", "rank", "state"), SIGNAL_CASES)
def test_a_signal_to_either_rank_paused_or_running_ends_the_job_as_plain(name, rank, state, tmp_path):
    """SIGINT, SIGTERM or SIGHUP to rank 0 (the one the client talks to) or rank 1, while the job
    waits at its first pause, while a client steps it node by node (both ranks in lockstep), or
    while a client has let it run on: torchrun's status and the failed rank's exit code are a
    plain job's, no rank is left, the runtime file is gone."""
    signum, runtime = SIGNALS[name], tmp_path / "rt"
    attached: list[JobClient] = []

    def bring(job: Job) -> None:
        if state == "stepping":
            agent = job.agent()
            client = JobClient(agent["address"], agent["token"], timeout=TIMEOUT)
            attached.append(client)
            client.paused(TIMEOUT)
            for _ in range(3):  # a few steps, each answered by the next pause
                client.submit(parse("step"))
                client.paused(TIMEOUT)
        elif state == "running":
            agent = job.agent()
            client = JobClient(agent["address"], agent["token"], timeout=TIMEOUT)
            attached.append(client)
            client.paused(TIMEOUT)
            client.submit(parse("continue"))
            seen = _steps(job)
            deadline = time.monotonic() + TIMEOUT
            while _steps(job) < seen + 4:
                assert time.monotonic() < deadline and job.proc.poll() is None, job.output()
                time.sleep(0.05)
        else:
            time.sleep(1.0)  # `ready` is printed just before the backward that pauses

    try:
        ending = _signal_rank(
            torchrun("-m", "gradtui", "--listen", "127.0.0.1:0", script(LOOP)), signum, rank, runtime, bring
        )
    finally:
        for client in attached:
            client.close()
    assert ending == plain_loop(signum, rank, tmp_path)
    assert list(runtime.glob("agent-*.json")) == []
