"""gradtui's own theme: colours that are exact xterm-256 palette entries, so a terminal with
256 colours shows what a truecolour one does (panes' borders stay apart from the background,
warnings from errors). `--theme NAME` picks any of Textual's themes instead (the palette too).
"""

from __future__ import annotations

from textual.theme import Theme

GRADTUI_THEME = Theme(
    name="gradtui",
    primary="#5fafff",  # 75
    secondary="#87afd7",  # 110
    accent="#ffaf00",  # 214
    foreground="#d0d0d0",  # 252
    background="#1c1c1c",  # 234
    surface="#262626",  # 235
    panel="#303030",  # 236
    success="#87d787",  # 114
    warning="#ffaf5f",  # 215
    error="#ff5f5f",  # 203
    dark=True,
)

DEFAULT_THEME = GRADTUI_THEME.name
