"""`run_app`: the UI on a target in this terminal, with the signal handlers installed and
gradtui.ui.watchdog's last resort; once the app has ended of a signal, the process dies of it.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Iterable

from gradtui.protocol import events as ev
from gradtui.protocol.dying import die_now
from gradtui.protocol.options import RunOptions
from gradtui.ui.app import GradtuiApp
from gradtui.ui.client import QUIT_GRACE
from gradtui.ui.watchdog import QuitWatchdog
from gradtui.wire.child import ChildTarget
from gradtui.wire.target import DebugTarget

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""The signals that quit the UI (and the script with it)."""


def run_app(
    options: RunOptions | None,
    *,
    target: DebugTarget | None = None,
    commands: Iterable[str] = (),
    theme: str | None = None,
    passes_first: bool = False,
    die_by_signal: bool = True,
    untold_end: Callable[[ev.ScriptFinished], None] | None = None,
) -> int:
    """Run the UI on `options`' script in a child agent (or on `target`) until the user quits;
    return the script's exit status (QUIT_STATUS if the user quit before it ended).

    SIGINT, SIGTERM and SIGHUP quit (`GradtuiApp.on_signal`) and arm a QuitWatchdog; once the app
    has ended, the process dies of the signal, as python would (`die_by_signal`; 130, 143, 129).
    The handlers are Python's own (`signal.signal`), not the loop's: they run even while the loop
    is blocked in a write to a dead terminal, which the loop's handlers (run by the loop) never would.
    `untold_end`: see ChildTarget (how a child that died without saying so ended)."""
    if target is None:
        assert options is not None
        target = ChildTarget(options, untold_end)
        commands = options.commands
    app = GradtuiApp(target=target, commands=commands, theme=theme, passes_first=passes_first)
    loop = asyncio.new_event_loop()
    watchdog = QuitWatchdog(target, lambda: app._driver, QUIT_GRACE)
    watchdog.start()

    signalled: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        signalled.append(signum)
        watchdog.arm(signum)
        try:
            loop.call_soon_threadsafe(app.on_signal, signum)
        except RuntimeError:  # the loop is closed: the app has ended, the watchdog sees to the rest
            pass

    previous = {signum: signal.signal(signum, on_signal) for signum in SIGNALS}
    try:
        app.run(loop=loop)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        watchdog.disarm()
        app.link.kill_now()  # however the app ended, no agent of ours is left running
        close_loop(loop)
    if signalled and die_by_signal:
        die_now(signalled[0])  # as python, killed by it (the terminal is restored, the agent gone)
    return app.return_code or app.link.exit_status  # a crash of the UI itself is 1


LOOP_GRACE = 2.0
"""Seconds `close_loop` lets the tasks still pending finish their cancellation (and, again, the
async generators close)."""


def close_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Close `loop` as `asyncio.run` closes its own: a task still pending is cancelled and run to
    its end (bounded by LOOP_GRACE), async generators are closed, then the loop. A task closed
    with the loop unfinished is destroyed later by the garbage collector, outside its context,
    and says so on the terminal the UI has just given back."""
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    try:
        if pending:
            loop.run_until_complete(asyncio.wait(pending, timeout=LOOP_GRACE))
        loop.run_until_complete(asyncio.wait_for(loop.shutdown_asyncgens(), LOOP_GRACE))
    finally:
        loop.close()
