"""The user's script inside a Textual thread worker, and how to stop it without blocking.

`ScriptRunner.stop` blocks while it waits for the script to unwind; the app must not, so
`ScriptHost.stop` is a coroutine doing the same steps (quit, wait, interrupt, wait) with
`asyncio.sleep` between polls of `ScriptRunner.finished`.
"""

from __future__ import annotations

import asyncio

from gradtui.core.runner import ScriptRunner


class ScriptHost:
    """Runs a ScriptRunner in the worker thread that calls `run`; stops it from the app."""

    def __init__(self, runner: ScriptRunner) -> None:
        self.runner = runner
        self.done = runner.finished
        """Set when the script has ended (unwound, torch's functions restored)."""
        self._gave_up = False

    @property
    def exit_status(self) -> int | None:
        """The script's exit status once it ended."""
        return self.runner.exit_status

    def run(self) -> int:
        """The worker's body: run the script to its end in this thread."""
        return self.runner.run()

    async def stop(self, timeout: float = 1.0) -> bool:
        """Quit the session and wait (asynchronously) for the script to unwind.

        A paused hook unblocks at once. A script busy elsewhere (a forward pass, a sleep)
        gets GradtuiQuit raised in its thread after 0.3 s. True if it ended in time. Once a
        stop has timed out (the script sits in a C call), later ones do not wait again.
        """
        runner = self.runner
        if self.done.is_set():
            return True  # ended on its own: nothing to stop
        if self._gave_up:
            return False
        runner.session.quit()
        if runner.thread_id is None:
            return True  # never started; `run` will see the quit and not start
        loop = asyncio.get_running_loop()
        start = loop.time()
        interrupted = False
        while not self.done.is_set() and loop.time() < start + timeout:
            if not interrupted and loop.time() > start + 0.3:
                runner.interrupt()
                interrupted = True
            await asyncio.sleep(0.01)
        self._gave_up = not self.done.is_set()
        return not self._gave_up
