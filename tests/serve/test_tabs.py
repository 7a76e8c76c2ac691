"""The pieces of gradtui serve around the tab processes, in this process: stopping a tab
process (asked, then killed with its group), and which agent a tab attaches to."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

from textual_serve.download_manager import DownloadManager

from gradtui.serve.agents import choose
from gradtui.serve.web import TabService
from gradtui.wire.runtime import AgentEntry, write_entry
from tests.processes import gone

STUBBORN = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
open(sys.argv[1], "w").write(str(child.pid))
print("__GANGLION__", flush=True)
time.sleep(60)
"""
"""A tab process that ignores the quit it is sent, with a child of its own in its group."""

OBEDIENT = """
import sys
print("__GANGLION__", flush=True)
sys.stdin.buffer.read(1)  # the quit packet
"""
"""A tab process that ends when anything arrives on its stdin (the quit packet)."""


async def _nothing(*args) -> None:
    pass


def _service(argv: list[str], stop_timeout: float) -> TabService:
    return TabService(
        argv,
        stop_timeout=stop_timeout,
        write_bytes=_nothing,
        write_str=_nothing,
        close=_nothing,
        download_manager=DownloadManager(),
    )


def _end(service: TabService) -> None:
    """However the test went, no process of it is left (SIGKILL to its group)."""
    process = service.process
    if process is not None and process.returncode is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


async def test_a_tab_process_that_ends_when_asked_is_not_killed():
    service = _service([sys.executable, "-c", OBEDIENT], stop_timeout=30)  # it ends long before
    try:
        await service.start(80, 24)
        await service.stop()
        await service.stop()  # a second stop (the websocket handler's, the server's) is harmless
        assert service.process.returncode == 0
    finally:
        _end(service)


async def test_a_tab_process_that_ignores_the_quit_is_killed_with_its_whole_group(tmp_path):
    pidfile = tmp_path / "grandchild"
    service = _service([sys.executable, "-c", STUBBORN, str(pidfile)], stop_timeout=0.5)
    grandchild = None
    try:
        await service.start(80, 24)
        deadline = time.monotonic() + 30
        while not (pidfile.exists() and pidfile.read_text()):
            assert time.monotonic() < deadline, "the tab process did not start its child"
            await asyncio.sleep(0.05)
        grandchild = int(pidfile.read_text())
        await service.stop()
        assert service.process.returncode == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while not gone(grandchild):
            assert time.monotonic() < deadline, "the tab process's own child outlived it"
            await asyncio.sleep(0.05)
    finally:
        _end(service)
        if grandchild is not None and not gone(grandchild):
            os.kill(grandchild, signal.SIGKILL)


def test_with_no_address_a_tab_takes_the_agent_whose_runtime_file_is_newest(tmp_path, monkeypatch):
    monkeypatch.setenv("GRADTUI_RUNTIME_DIR", str(tmp_path))
    assert choose(None) is None
    older = write_entry(AgentEntry("127.0.0.1:1111", "tok-a", os.getppid(), "/x/old.py"))
    newer = write_entry(AgentEntry("127.0.0.1:2222", "tok-b", os.getpid(), "/x/new.py"))
    os.utime(older, (1000, 1000))
    os.utime(newer, (2000, 2000))
    assert choose(None).address == "127.0.0.1:2222"
    os.utime(older, (3000, 3000))  # the file written last wins, whatever the pids
    assert choose(None).address == "127.0.0.1:1111"
    assert choose("127.0.0.1:2222").script == "/x/new.py"
    assert choose("10.0.0.9:5").address == "10.0.0.9:5" and choose("10.0.0.9:5").script == ""
