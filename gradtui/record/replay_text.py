"""What a replay says beyond a live run's words: its help, its refusals (what a recording
cannot do, one table, one wording), a pass's flow, a pass without per-node data, the run's
breakpoint hits; text from a `Recording` (gradtui.record.reader), for `ReplayTarget`."""

from __future__ import annotations

from typing import Any

from gradtui.protocol.commands import (
    COMMANDS,
    BreakIn,
    Clip,
    Command,
    Exec,
    Print,
    Scale,
    SetGrad,
    Where,
    Why,
    Zero,
    help_text,
)
from gradtui.protocol.flowtext import flow_answer
from gradtui.record.infos import PassInfo

READ_ONLY = "read-only: a recording keeps gradient statistics, not tensors"


def replay_help() -> str:
    """A replay's `help`: the commands that work on a recording, and which need a live run."""
    live = ", ".join(c.verb for c in COMMANDS if c.summary and not c.where & Where.REPLAY and c.where & Where.LIVE)
    return help_text(Where.REPLAY) + f"\n(replay is read-only: {live} and print EXPR need a live run)"


EDITS = "edits need a live run"

NEEDS_LIVE = {
    Print: "print EXPR needs a live run (print alone shows the statistics)",
    Scale: EDITS,
    Zero: EDITS,
    Clip: EDITS,
    SetGrad: EDITS,
    Why: "why needs the live script's variables",
    Exec: "! runs Python in the live script (a recording keeps statistics, not tensors)",
    BreakIn: "pause breaks in to a running script; a replay is paused already",
}
"""What a replay refuses because a recording keeps statistics, not tensors: said in one place,
one wording (`refusal`)."""


def flow_text(rec: Any, index: int) -> tuple[str, bool]:
    """Pass `index`'s recorded flow as `flow` prints it, and whether there was one."""
    flow = rec.flow(index) if rec is not None else ()
    if not flow:
        return f"no gradient flow recorded for pass {index}", False
    return flow_answer(index, flow), True


def no_nodes(rec: Any, info: PassInfo) -> str:
    """Why `pass N` cannot show a pass kept without per-node data, with what the recording has."""
    loss = ", ".join(f"{v:.6g}" for v in info.losses if v is not None) or "-"
    norm = "-" if info.grad_norm is None else f"{info.grad_norm:.6g}"
    listed = ranges(rec.with_nodes()) or "none"
    return (
        f"pass {info.index} has no per-node data (loss {loss} · gradient norm {norm} · "
        f"non-finite {info.nonfinite}); passes with per-node data: {listed}; its flow: flow {info.index}"
    )


def recorded_hits(rec: Any) -> list[str]:
    """The run's breakpoint hits, listed under the replay's own breakpoints."""
    hits = rec.hits() if rec is not None else []
    if not hits:
        return []
    return [
        "recorded hits:",
        *(f"  breakpoint {h['breakpoint']} ({h['spec']}) at pass {h['pass']} #{h['node']}" for h in hits),
    ]


def refusal(command: Command) -> str:
    """Why a replay cannot run `command` (see NEEDS_LIVE)."""
    why = NEEDS_LIVE.get(type(command))
    return f"cannot run {command.text!r} in a replay" if why is None else f"{READ_ONLY}: {why}"


EDITS_REFUSED = f"{READ_ONLY}: {EDITS}"
"""How a replay refuses every edit: also what a client says at once, before it asks for a value
(the target's `info.extra["edits_refused"]`)."""


def ranges(indexes: list[int]) -> str:
    """`26-30, 35`: sorted indexes as runs."""
    runs: list[list[int]] = []
    for i in sorted(indexes):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
