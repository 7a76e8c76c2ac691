"""The tab process's Textual driver: the web driver, with the page's sizes applied in the order
the page sent them.

Textual's web driver tells the app its first size from the event loop (a task it schedules as
it starts) and every later size from its input thread (a message put straight on the app's
queue). A size the page sends while the tab process starts up (the page measures its terminal
again once its websocket opens, and a font that loaded in between changes the measure) sits
in the process's stdin before the driver starts; the input thread reads it at once, and its
Resize overtook the first one: the app stayed at the size the page had before, in part of the
window. Here every size goes the first one's way, so they arrive in the order they were sent.
"""

from __future__ import annotations

import asyncio
from typing import Any

from textual import events
from textual.drivers.web_driver import WebDriver
from textual.geometry import Size


class TabDriver(WebDriver):
    """Textual's WebDriver whose resizes keep their order (see module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loop: asyncio.AbstractEventLoop | None = None  # type: ignore[assignment]  # None until it starts

    def start_application_mode(self) -> None:
        """Start as the web driver does, noting the app's loop (the sizes are posted on it)."""
        self._loop = asyncio.get_running_loop()
        super().start_application_mode()

    def on_meta(self, packet_type: str, payload: dict[str, object]) -> None:
        """A packet from textual-serve: a resize is posted behind the first size, not before it;
        anything else as the web driver handles it."""
        match packet_type:
            case "resize" if self._loop is not None:
                try:
                    size = Size(int(payload["width"]), int(payload["height"]))  # type: ignore[call-overload]
                except (KeyError, TypeError, ValueError):
                    return  # not a size: the app keeps the one it has
                self._size = (size.width, size.height)
                asyncio.run_coroutine_threadsafe(self._resize(size), self._loop)
            case _:
                super().on_meta(packet_type, payload)

    async def _resize(self, size: Size) -> None:
        """On the app's loop: tell the app its size (as the driver's first size is told)."""
        self._app.post_message(events.Resize(size, size))
