"""The documented pictures of the screen say what the app shows (README once titled the node list
"nodes · engine order" long after the app said "pass 0 · 12 nodes"): the demo seven `s` presses
in, as README's "The screen" draws it, then `m`, as docs/usage.md's "The screen" draws it."""

from __future__ import annotations

import re

import pytest

from gradtui.cli.main import demo_path
from gradtui.ui.app import GradtuiApp
from gradtui.ui.widgets.node_list import NodeList
from tests.helpers import REPO, wait_paused_at


def _pictures(page: str) -> list[list[str]]:
    """The code blocks of a page's "The screen" section, as lines."""
    text = (REPO / page).read_text(encoding="utf-8")
    section = text[text.index("## The screen") : text.index("\n## ", text.index("## The screen") + 1)]
    return [block.splitlines() for block in re.findall(r"```\n(.*?)\n```", section, flags=re.S)]


def _title(line: str) -> str:
    """The title of the first pane on a picture's line: `╭─ pass 0 · 12 nodes ───╮` -> `pass 0 · 12 nodes`."""
    found = re.match(r"╭─ (.+?) ─", line)
    assert found, line
    return found.group(1)


@pytest.mark.asyncio
async def test_readmes_screen_pictures_carry_the_apps_titles():
    screen, modules = _pictures("README.md")[0], _pictures("docs/usage.md")[0]
    app = GradtuiApp(demo_path())
    async with app.run_test(size=(118, 40)) as pilot:
        await wait_paused_at(pilot, 0)
        for node in app.state.view.order[1:8]:
            await pilot.press("s")
            await wait_paused_at(pilot, node)
        nodes = app.query_one(NodeList)
        assert _title(screen[1]) == nodes.border_title
        assert f"paused at #{app.state.current}" in screen[0]
        await pilot.press("m")
        await pilot.pause()
        assert _title(modules[0]) == nodes.border_title
