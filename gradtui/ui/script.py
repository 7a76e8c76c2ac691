"""The user's script inside a Textual thread worker, and how to stop it without blocking.

`ScriptRunner.stop` joins the thread the runner started itself (`start`); a Textual thread
worker runs `run` in a pool thread that outlives the script, where `stop` would neither
interrupt nor know when the script ended. So `ScriptHost` keeps its own "done" event and
thread id, and `stop()` is a coroutine: the event loop never blocks on it. The interrupt
itself follows the runner's protocol (its `_interrupt` lock and `_interruptible` flag), so
it never lands in the runner's cleanup.
"""

from __future__ import annotations

import asyncio
import ctypes
import threading

from gradtui.core.runner import ScriptRunner
from gradtui.core.session import GradtuiQuit


class ScriptHost:
    """Runs a ScriptRunner in whatever thread calls `run` and can stop it from the app."""

    def __init__(self, runner: ScriptRunner) -> None:
        self.runner = runner
        self.done = threading.Event()
        """Set when `run` has returned (the script unwound, torch's functions restored)."""
        self.thread_id: int | None = None
        self.exit_status: int | None = None

    def run(self) -> int:
        """The worker's body: run the script to its end in this thread."""
        self.thread_id = threading.get_ident()
        try:
            if self.runner.session.quitting:
                self.exit_status = 0  # quit before the script even started
                return 0
            self.exit_status = self.runner.run()
        finally:
            self.done.set()
        return self.exit_status

    async def stop(self, timeout: float = 1.0) -> bool:
        """Quit the session and wait (asynchronously) for the script to unwind.

        A paused hook unblocks at once. A script busy elsewhere (a forward pass, a sleep)
        gets GradtuiQuit raised in its thread after 0.3 s. True if it ended in time.
        """
        self.runner.session.quit()
        if self.thread_id is None:
            return True  # never started; `run` will see the quit and not start
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        interrupted = False
        while not self.done.is_set() and loop.time() < deadline:
            if not interrupted and loop.time() > deadline - timeout + 0.3:
                self._interrupt()
                interrupted = True
            await asyncio.sleep(0.01)
        return self.done.is_set()

    def _interrupt(self) -> None:
        """Raise GradtuiQuit in the script's thread, only while the script's own code runs."""
        runner = self.runner
        with runner._interrupt:  # the runner's protocol: see ScriptRunner.stop and _disarm
            if runner._interruptible and not self.done.is_set() and self.thread_id is not None:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self.thread_id), ctypes.py_object(GradtuiQuit))
