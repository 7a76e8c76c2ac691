"""The boundaries docs/architecture.md draws, as what a process really loads: the core without the UI, the
UI without the session, clients without torch (the static import rules: tests/test_layers.py)."""

from __future__ import annotations

import subprocess
import sys


def _modules_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def test_the_ui_never_loads_the_session_or_patches_torch():
    loaded = _modules_after("import gradtui.ui.app, gradtui.cli.attach, gradtui.wire.child")
    assert "gradtui.engine.session" not in loaded
    assert "gradtui.engine.process.runner" not in loaded


def test_clients_never_load_torch():
    """A client formats the statistics it receives: importing torch would cost it seconds of
    start-up (the UI, `attach`, a browser tab, `replay`, `export`)."""
    loaded = _modules_after(
        "import gradtui.ui.app, gradtui.cli.attach, gradtui.wire.child, gradtui.cli.options, "
        "gradtui.clients.headless, gradtui.serve.tab, gradtui.cli.serve, gradtui.cli.replay, "
        "gradtui.cli.export, gradtui.record.replay"
    )
    assert "torch" not in loaded


def test_the_core_and_the_agent_never_load_textual_or_rich():
    loaded = _modules_after(
        "import gradtui.engine.session, gradtui.engine.process.runner, gradtui.agent.main, "
        "gradtui.agent.listen, gradtui.clients.headless"
    )
    assert not {m.split(".")[0] for m in loaded} & {"textual", "rich"}
