"""gradtui as a person runs it, in a real terminal (tmux at 80x24 and 160x45): the demo's first
pause and `q` (or ctrl+q), a run continued to its end, attach / detach / re-attach to a script
under `--listen`, and `gradtui replay` of a recording. Each checks the exit status, that nothing
but gradtui's own words reached the terminal (no traceback, no asyncio complaint), and that the
terminal was left as it was found (tests/processes.py's Terminal).

The suite's other UI tests drive the app in-process (Textual's Pilot), where the event loop's
end, the terminal's modes and what is printed after the app has left are never seen.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from gradtui.protocol.events import QUIT_STATUS
from tests.helpers import REPO, SCRIPTS
from tests.processes import PROCESS_TIMEOUT, TERMINAL_SIZES, Terminal, gradtui_command

pytestmark = pytest.mark.timeout(240)

SIZE_IDS = [f"{w}x{h}" for w, h in TERMINAL_SIZES]


def _environment(runtime: Path) -> dict[str, str]:
    """The pane's variables: this checkout's gradtui, a runtime folder of the test's own."""
    return {"PYTHONPATH": str(REPO), "GRADTUI_RUNTIME_DIR": str(runtime)}


@pytest.fixture
def runtime(tmp_path: Path) -> Path:
    """A private runtime folder (where a listening agent says where it listens)."""
    folder = tmp_path / "runtime"
    folder.mkdir(mode=0o700)
    return folder


@pytest.fixture
def terminal(tmp_path: Path, runtime: Path):
    """Factory of Terminals (each in a folder of its own); all are closed at the end."""
    opened: list[Terminal] = []

    def open_(arguments: list[str], size: tuple[int, int]) -> Terminal:
        folder = tmp_path / f"terminal{len(opened)}"
        folder.mkdir()
        term = Terminal([*gradtui_command(), *arguments], folder, *size, env=_environment(runtime))
        opened.append(term)
        return term

    yield open_
    for term in opened:
        term.close()


def paused(screen: str, node: int) -> bool:
    """The UI paused at `node`: the header says so, in its long form or, at 80 columns, its
    short one (`paused at #0 MseLossBackward0 (loss)`, `paused #0 (loss)`)."""
    return re.search(rf"paused (at )?#{node}\b", screen) is not None


def first_pause(screen: str) -> bool:
    """The UI at its first pause."""
    return paused(screen, 0)


def ended(screen: str, status: int) -> bool:
    """The UI has taken in the script's end, as a person sees it: the header, the app's first row,
    says `finished · exit N` (or `failed · exit N`) at its right end. A word such as `finished`
    anywhere on the screen is not enough: the detail pane says `pass 0 finished` as soon as that
    pass ends, and the script's own output comes by its pipe, ahead of the agent's events, so at
    160x45 the demo's last print and that line were on screen while the UI still had the script
    running; a `q` then stops a script the UI believes is running, and leaves with 130."""
    header = screen.splitlines()[0].rstrip() if screen.strip() else ""
    return re.search(rf"(finished|failed) · exit {status}$", header) is not None


@pytest.mark.parametrize("size", TERMINAL_SIZES, ids=SIZE_IDS)
@pytest.mark.parametrize("key", ["q", "C-q"])
def test_the_demo_quit_at_its_first_pause(terminal, size, key):
    """`gradtui` with no script opens the demo (README's first command); `q` or ctrl+q at the first
    pause stops the script and leaves: exit 130, no traceback, the terminal as it was."""
    term = terminal([], size)
    term.wait(first_pause, "the demo's first pause", PROCESS_TIMEOUT)
    term.keys(key)
    term.assert_clean_exit(QUIT_STATUS)


@pytest.mark.parametrize("size", TERMINAL_SIZES, ids=SIZE_IDS)
@pytest.mark.parametrize("fixture", ["nanmlp.py", "user_hook.py"])
def test_a_script_quit_at_its_first_pause(terminal, tmp_path, size, fixture):
    """The same on a script whose gradient turns NaN and on one with a hook of its own."""
    arguments = {"nanmlp.py": [], "user_hook.py": [str(tmp_path / "grads.pt")]}[fixture]
    term = terminal([str(SCRIPTS / fixture), *arguments], size)
    term.wait(first_pause, f"{fixture}'s first pause", PROCESS_TIMEOUT)
    term.keys("q")
    term.assert_clean_exit(QUIT_STATUS)


@pytest.mark.parametrize("size", TERMINAL_SIZES, ids=SIZE_IDS)
def test_the_demo_continued_to_its_end_then_quit(terminal, size):
    """`c` runs the demo to its end (its three passes, its prints in the output pane); `q` then
    leaves with the script's own status, 0."""
    term = terminal([], size)
    term.wait(first_pause, "the demo's first pause", PROCESS_TIMEOUT)
    term.keys("c")
    term.wait(lambda s: "step 2 loss" in s and ended(s, 0), "the demo's end, in the header", 60)
    term.keys("q")
    term.assert_clean_exit(0)


class Listener:
    """`gradtui --listen 127.0.0.1:0 SCRIPT` in the background, as a person starts it with `&`:
    its words to files, ended (SIGKILL, bounded) at `close` if still running."""

    def __init__(self, script: str, folder: Path, runtime: Path) -> None:
        self.out, self.err = folder / "listen.out", folder / "listen.err"
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        env.update(_environment(runtime))
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.process = subprocess.Popen(
                [*gradtui_command(), "--listen", "127.0.0.1:0", script],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                env=env,
            )
        self.runtime = runtime

    def wait_listening(self, timeout: float = PROCESS_TIMEOUT) -> None:
        """Until the agent's runtime file is there (`gradtui attach` finds it there)."""
        deadline = time.monotonic() + timeout
        while not any(self.runtime.iterdir()):
            assert self.process.poll() is None, f"the listener ended: {self.err.read_text()}"
            if time.monotonic() > deadline:
                pytest.fail(f"no agent listening after {timeout}s: {self.err.read_text()}")
            time.sleep(0.1)

    def wait(self, timeout: float = 30) -> int:
        """The listener's exit status, once it has ended."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the listener still ran {timeout}s after its script was stopped: {self.err.read_text()}")

    def close(self) -> None:
        """Kill the listener if it still runs."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@pytest.fixture
def listener(tmp_path: Path, runtime: Path):
    """Factory of one Listener, closed at the end."""
    started: list[Listener] = []

    def start(script: str) -> Listener:
        started.append(Listener(script, tmp_path, runtime))
        return started[-1]

    yield start
    for each in started:
        each.close()


@pytest.mark.parametrize("size", TERMINAL_SIZES, ids=SIZE_IDS)
def test_attach_detach_and_attach_again(terminal, listener, size):
    """`gradtui --listen 127.0.0.1:0 demo.py &`, `gradtui attach`: a breakpoint on the demo's last
    pass, `D` detaches (exit 0, one line saying the script runs on); attached again, the UI finds
    the script paused at that breakpoint; `q` asks, `q` again stops it: both exit 130."""
    from gradtui.cli.main import demo_path

    agent = listener(demo_path())
    agent.wait_listening()
    first = terminal(["attach"], size)
    first.wait(first_pause, "the first pause, attached", PROCESS_TIMEOUT)
    first.keys(":")
    first.text("break pass 2")
    first.keys("Enter")
    first.wait(lambda s: "breakpoint 1" in s, "the breakpoint set")
    first.keys("c")  # the run's first pause waits for a client that resumes it: run on to the breakpoint
    first.wait(lambda s: "pass 2" in s and paused(s, 0), "the breakpoint's pause", PROCESS_TIMEOUT)
    first.keys("D")
    said = first.assert_clean_exit(0)
    assert "detached" in said, said

    second = terminal(["attach"], size)
    second.wait(lambda s: "pass 2" in s and paused(s, 0), "the breakpoint's pause, attached again", PROCESS_TIMEOUT)
    second.keys("q")
    second.wait(lambda s: "runs in its own process" in s, "the question how to leave")
    second.keys("q")
    second.assert_clean_exit(QUIT_STATUS)
    assert agent.wait() == QUIT_STATUS
    for foreign in ("Traceback", "Task was destroyed", "Exception ignored"):
        assert foreign not in agent.err.read_text()


@pytest.fixture(scope="module")
def demo_recording(tmp_path_factory) -> Path:
    """`gradtui --headless --record REC.db demo.py`, run once for the file: each replay test
    opens a copy of its own (a headless run of the demo is seconds of CPU, the same for both)."""
    from gradtui.cli.main import demo_path

    folder = tmp_path_factory.mktemp("demo-recording")
    runtime = folder / "runtime"
    runtime.mkdir(mode=0o700)
    db = folder / "rec.db"
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env.update(_environment(runtime))
    recorded = subprocess.run(
        [*gradtui_command(), "--headless", "--record", str(db), demo_path()],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    assert recorded.returncode == 0, recorded.stderr
    return db


@pytest.mark.parametrize("size", TERMINAL_SIZES, ids=SIZE_IDS)
def test_replay_of_a_headless_recording(terminal, tmp_path, demo_recording, size):
    """`gradtui --headless --record REC.db demo.py` (once, `demo_recording`), then `gradtui
    replay REC.db` on a copy: it opens on the passes, `q` closes them, `q` again leaves with 0."""
    db = tmp_path / "rec.db"
    shutil.copyfile(demo_recording, db)
    term = terminal(["replay", str(db)], size)
    term.wait(lambda s: "passes · 3 run" in s, "the replay's passes", PROCESS_TIMEOUT)
    term.keys("q")  # closes the passes view (its own q), as escape does
    term.wait(lambda s: paused(s, 0) and "passes · 3 run" not in s, "the replay's debugger")
    term.keys("q")
    term.assert_clean_exit(0)


def test_an_attached_ui_whose_agent_is_killed_says_so_and_leaves_with_1(terminal, listener):
    """`gradtui attach` to a script that runs on; the agent is killed (SIGKILL: no goodbye). The
    UI stopped there, showing the script still running, and `q` left with 0, as if it had
    succeeded: it must say the connection ended untold, and leave with 1 (not a success)."""
    import signal

    agent = listener(str(SCRIPTS / "endless_loop.py"))
    agent.wait_listening()
    term = terminal(["attach"], TERMINAL_SIZES[1])
    term.wait(first_pause, "the first pause, attached", PROCESS_TIMEOUT)
    term.keys("c")
    term.wait(lambda s: "step 3" in s, "the script running on", 60)
    agent.process.send_signal(signal.SIGKILL)
    agent.wait()
    screen = term.wait(lambda s: "is lost to this UI" in s, "the UI saying the agent is gone")
    assert "running" not in screen.splitlines()[0], screen
    term.keys("q")
    term.assert_clean_exit(1)
