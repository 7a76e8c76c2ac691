"""The keys of the app, in one table: the bindings, the footer, the help screen and the
command palette are all made from it."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from textual.app import SystemCommand
from textual.binding import Binding, BindingType
from textual.markup import escape


@dataclass(frozen=True)
class Key:
    """One key: what it does (an app action) and how it is described."""

    keys: str
    action: str
    short: str
    """Footer label."""
    help: str
    """Help screen and command palette text."""
    footer: bool = True
    priority: bool = False
    """Checked by the app before the key goes to the focused widget (see `:`)."""


KEYS: tuple[Key, ...] = (
    Key("s", "step", "step", "step: run the paused node, pause before the next one"),
    Key("n", "step", "next", "next: the same as s (pdb's n; a backward pass has no calls to step over)", footer=False),
    Key("c", "cont", "cont", "continue: run until a breakpoint hits or the script ends"),
    Key("f", "finish", "finish", "finish: run to the end of this pass"),
    Key(
        "r",
        "finish",
        "return",
        "return: the same as f (pdb's r runs to the end of the frame; here, of the pass)",
        footer=False,
    ),
    Key(
        "b",
        "toggle_break",
        "break",
        "toggle a breakpoint on the selected node (#ID); in the source view (v): break FILE:LINE on the cursor's line",
    ),
    Key(
        "B",
        "breakpoints",
        "breakpoints",
        "breakpoints: each with its hits and last hit; enter jumps there, space turns it off or on, delete removes it",
        footer=False,
    ),
    Key("x", "scale", "scale", "scale the incoming gradient by a factor", footer=False),
    Key("z", "zero", "zero", "zero the incoming gradient", footer=False),
    Key("e", "edit", "edit", "replace the incoming gradient by an expression of g"),
    Key("p", "print", "print", "print statistics of the incoming gradient", footer=False),
    Key(
        "exclamation_mark",
        "interact",
        "python",
        "interact: a Python console at the pause (pdb's interact, "
        "pudb's shell): g, node, module, the call-site variables, torch; g = ... edits the gradient",
        footer=False,
    ),
    Key(
        "u",
        "up",
        "up",
        "up: select a consumer of the selected node, where its gradient came from "
        "(pdb's u goes to the caller; the root is the top here)",
        footer=False,
    ),
    Key(
        "d", "down", "down", "down: select the first input of the selected node, where its gradient goes", footer=False
    ),
    Key("slash", "find", "find", "find a node by op, label, module or source line (fuzzy, as ctrl+p)"),
    Key("N", "find_next", "next match", "next match of the last find", footer=False),
    Key(
        "g", "goto_current", "paused", "jump to the paused node (pdb's w(here) is the header's right end)", footer=False
    ),
    Key(
        "v",
        "source",
        "source",
        "source view: the node's whole file, its line marked, the lines that made "
        "this pass's nodes with their count; enter on one selects its nodes in turn, b breaks there",
        footer=False,
    ),
    Key(
        "V",
        "variables",
        "variables",
        "variables where backward was called (pudb's locals): shape, dtype, "
        "requires_grad, on the graph, grad norm; enter selects its node, or says why it is not on the graph",
        footer=False,
    ),
    Key(
        "L",
        "dock_variables",
        "locals",
        "the variables docked beside the detail pane, kept on screen for "
        "every pass and pause, as pudb keeps them (again: undocked); the session remembers it",
        footer=False,
    ),
    Key(
        "m",
        "modules",
        "modules",
        "module view: the node list as a tree of nn.Modules (again: engine order)",
        footer=False,
    ),
    Key(
        "A",
        "by_difference",
        "by diff",
        "against a reference (--against): the node list sorted by each node's "
        "difference from it, largest first (again: engine order); the diff column is the larger of its "
        "gradient's and its forward's relative difference",
        footer=False,
    ),
    Key(
        "w",
        "flow",
        "flow",
        "gradient flow: grad norm / weight norm per parameter after the shown pass "
        "(pdb's w is where: here the header says where)",
        footer=False,
    ),
    Key("P", "passes", "passes", "passes: every pass kept, its loss, hits, non-finite; enter shows one"),
    Key(
        "left_square_bracket",
        "older_pass",
        "older",
        "show the previous pass kept (its node stats, its flow)",
        footer=False,
    ),
    Key("right_square_bracket", "newer_pass", "newer", "show the next pass kept (back to the live one)", footer=False),
    Key(
        "o",
        "zoom_output",
        "zoom output",
        "the output pane full screen (again: back); answers are there in full",
        footer=False,
    ),
    Key("Z", "zoom", "zoom", "zoom the focused pane full screen (again or escape: back)"),
    Key(
        "less_than_sign",
        "narrower",
        "narrower",
        "a narrower node list column (a drag of its right border too)",
        footer=False,
    ),
    Key("greater_than_sign", "wider", "wider", "a wider node list column", footer=False),
    Key(
        "minus",
        "graph_narrower",
        "graph -",
        "a narrower graph pane, a wider detail pane (160 columns and more)",
        footer=False,
    ),
    Key("plus", "graph_wider", "graph +", "a wider graph pane (160 columns and more)", footer=False),
    # priority: the app acts on `:` before it forwards the next keys, so `:why x` typed fast
    # or pasted reaches the bar whole; a `:` typed in the bar is inserted there (see the app)
    Key("colon", "command", "cmd", "type a command in the command bar", footer=False, priority=True),
    Key("question_mark", "help", "help", "this help screen"),
    Key(
        "D",
        "detach",
        "detach",
        "detach: leave the script running without this UI (an attached one: "
        "gradtui attach, a browser tab); its breakpoints stay armed",
        footer=False,
    ),
    Key("q", "quit", "quit", "quit: stop the script and leave (attached: asks, and offers detach)"),
    # priority: the app takes ctrl+c before a focused input (whose copy it would be), as pdb's and
    # pudb's Ctrl-C breaks in wherever the user is; the footer shows it while the script runs
    Key(
        "ctrl+c",
        "break_in",
        "pause",
        "pause: break in to the running script (pdb's and pudb's Ctrl-C): it "
        "pauses at the next backward node; a second Ctrl-C while it waits offers to quit",
        priority=True,
    ),
)

OTHER_KEYS: tuple[tuple[str, str], ...] = (
    ("↑ ↓ j k", "move in the node list"),
    ("pgup pgdn", "a page up / down"),
    ("home end", "first / last node"),
    ("click", "select the row clicked (node, module, flow and pass rows)"),
    ("enter space", "module view: fold / unfold the module"),
    ("→ ← l h", "module view: unfold / fold (pdb's l and h: the source is in the detail pane and v, help is ?)"),
    ("tab", "next pane (shift+tab: previous)"),
    ("↑ ↓ in bar", "command history"),
    ("escape", "leave the command bar (its text is dropped), or a zoomed pane"),
    ("ctrl+p", "command palette: nodes, every action, themes"),
)

DISPLAY = {
    "ctrl+c": "Ctrl-C",
    "exclamation_mark": "!",
    "slash": "/",
    "colon": ":",
    "question_mark": "?",
    "left_square_bracket": "[",
    "right_square_bracket": "]",
    "less_than_sign": "<",
    "greater_than_sign": ">",
    "minus": "-",
    "plus": "+",
}


APP_ACTIONS = frozenset({"quit", "break_in"})
"""Actions of the app itself, which act under any screen; the others are the debugger screen's,
so a modal screen (help, a prompt, the flow, the passes, the palette) gets those keys itself."""


def bindings(of_app: bool) -> list[BindingType]:
    """The app's bindings (`of_app`) or the debugger screen's, made from KEYS."""
    return [
        Binding(k.keys, k.action, k.short, show=k.footer, priority=k.priority)
        for k in KEYS
        if (k.action in APP_ACTIONS) == of_app
    ]


def palette_entry(key: Key) -> tuple[str, str]:
    """The command palette's title and text of a key: `step: run the paused node…` is titled
    `Step`; a help text that does not start with its name (or whose first colon is inside it,
    as in `(again or escape: back)`) is titled by the footer label."""
    title, colon, text = key.help.partition(": ")
    if not colon or "(" in title or len(title.split()) > 2:
        title, text = key.short, key.help
    return title[:1].upper() + title[1:], text


def display(key: Key) -> str:
    """How a key is written for people: `/` rather than `slash`."""
    return DISPLAY.get(key.keys, key.keys)


LIVE_ACTIONS = frozenset(
    {"step", "cont", "finish", "toggle_break", "scale", "zero", "edit", "print", "detach", "break_in", "interact"}
)
"""Actions that drive a running script: none once it has ended (the footer drops them)."""

REPLACED_COMMANDS = frozenset({"Quit", "Maximize", "Minimize"})
"""Textual's palette entries that gradtui's own replace (q, Z)."""


def palette_commands(run_action: Callable[[str], object]) -> Iterator[SystemCommand]:
    """The command palette's entries: every action once (`n` is `s`), titled by its name
    (`Zoom`, found by typing "zoom"), its help and key as the text."""
    seen = set()
    for key in KEYS:
        if key.action in seen:
            continue
        seen.add(key.action)
        title, text = palette_entry(key)
        yield SystemCommand(title, escape(f"{text} · key {display(key)}"), functools.partial(run_action, key.action))
