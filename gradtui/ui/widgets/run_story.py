"""The detail pane's words about the run rather than one node: how the shown pass ended (its leaf
gradients, from the flow when it has no node statistics), how the script ended and where to look
next, a pass that ran unhooked, and a module row of the module view summed up.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from textual.content import Content

from gradtui.protocol.nodes import node_info
from gradtui.protocol.stats import format_number
from gradtui.ui import fmt
from gradtui.ui.flowtable import flow_rows
from gradtui.ui.modtree import ModuleTree, display_name
from gradtui.ui.state import PassView, UIState
from gradtui.ui.widgets.detail_text import ACCENT, ERROR, KEY, MUTED, OK, WARN, bad, heading, line

LEAVES_SHOWN = 12
"""At most this many leaf gradients are listed at the end of a pass."""

SUBMODULES_SHOWN = 8
"""At most this many submodules are listed for a module row."""


@dataclass(frozen=True, slots=True)
class RunStory:
    """The run's story (see module doc) from `state`; tracebacks' paths relative to `home`."""

    state: UIState
    home: str | None

    def unhooked(self, view: PassView) -> list[Content]:
        """A pass that ran unhooked: the script's end first (at the end of a run), then what is
        known of the pass (its loss; its leaf gradients and flow once it has ended)."""
        note = " · ".join(filter(None, (view.loss_text(), "nothing could stop in it: no per-node statistics")))
        lines = list(self.script_end())
        lines += [Content("")] if lines else []
        lines.append(heading(f"pass {view.index} ran unhooked", note))
        if not view.finished:
            lines.append(Content.styled("its leaf gradients and flow are measured when it ends", MUTED))
        elif view.leaf_grads or view.flow:
            lines += list(self.pass_end(view))[1:]  # its heading says what the one above does
        return lines

    def pass_end(self, view: PassView) -> Iterable[Content]:
        """How the pass ended, nodes ran, loss; its leaves' gradients."""
        if not view.finished:
            return
        state = "failed" if view.error else "finished"
        ran = f"{view.done}/{view.total} nodes ran" if view.recorded else "ran unhooked"
        yield heading(f"pass {view.index} {state}", " · ".join(filter(None, (view.loss_text(), ran))))
        if not view.leaf_grads and view.flow:
            yield from self._flow_leaves(view)
            return
        leaves = list(view.leaf_grads.items())
        for leaf, stats in leaves[:LEAVES_SHOWN]:
            data = node_info(view.graph, leaf)
            name = data.param or ", ".join(data.labels) or f"#{leaf}"
            yield line(
                (f"  {name}.grad ", ACCENT), (f"#{leaf} ", MUTED), fmt.one_line(stats) if stats else ("None", WARN)
            )
        if len(leaves) > LEAVES_SHOWN:
            yield Content.styled(f"  … {len(leaves) - LEAVES_SHOWN} more leaves", MUTED)

    @staticmethod
    def _flow_leaves(view: PassView) -> Iterable[Content]:
        """Leaf gradients of a pass without node statistics, from its flow: norm, weight, flag."""
        rows = flow_rows(view.flow)
        yield Content.styled("  leaf gradients · w: the flow table", MUTED)
        for row in rows[:LEAVES_SHOWN]:
            flow = row.flow
            shape = "×".join(str(d) for d in flow.shape) or "scalar"
            grad = format_number(flow.grad_norm) if flow.grad_norm is not None else "None"
            flag = (f"  {row.flag}", WARN if row.flag not in ("zero weight", "no grad") else MUTED) if row.flag else ""
            yield bad(line((f"  {flow.name}.grad ", ACCENT), (f"[{shape}] ", MUTED), ("norm ", MUTED), grad, flag))
        if len(rows) > LEAVES_SHOWN:
            yield Content.styled(f"  … {len(rows) - LEAVES_SHOWN} more leaves (w)", MUTED)

    def script_end(self) -> Iterable[Content]:
        """The story of a run that ended: how, how many passes, the last pass, where to look."""
        state = self.state
        if not state.script_over:
            return
        if state.status == "quit":
            yield heading("script stopped", "you quit")
            return
        if state.passes == 0:
            yield Content.styled("the script never called backward() or torch.autograd.grad()", WARN)
        style = OK if state.status == "finished" else ERROR
        passes = f"  · {state.passes} pass{'es' if state.passes != 1 else ''} run" if state.passes else ""
        yield line(
            ("script ", "bold $text-primary"),
            (f"{state.status} · exit status {'unknown' if state.exit_status is None else state.exit_status}", style),
            (passes, MUTED),
        )
        if state.traceback and (state.view is None or state.view.failed_node is None):
            for text in fmt.user_traceback(state.traceback, self.home).rstrip().splitlines():
                yield Content.styled(text, ERROR)
        live, shown = state.live, state.view
        if live is not None and shown is not live:
            yield line(
                ("last pass ", MUTED), str(live.index), ("  " + live.loss_text(), MUTED), ("  ] goes back to it", MUTED)
            )
        hooked = state.last_recorded
        if hooked is not None and hooked is not shown:
            yield Content.styled(
                f"pass {hooked.index} has per-node statistics: P lists the passes, [ ] browse them", MUTED
            )
        elif hooked is None and state.passes:
            yield Content.styled(
                "no kept pass has per-node statistics: rerun with --record-all, or a breakpoint, to step through one",
                MUTED,
            )


def module_summary(tree: ModuleTree, path: str) -> list[Content]:
    """A module row of the module view summed up: its nodes, the gradient leaving it, its submodules."""
    module, stats = tree.modules[path], tree.stats(path)
    lines = [
        line(("module ", MUTED), (path, KEY)),
        line(
            ("nodes ", MUTED),
            str(stats.count),
            ("  ran ", MUTED),
            str(stats.ran),
            ("  direct ", MUTED),
            str(len(module.nodes)),
        ),
        bad(line(("gradient leaving it ", MUTED), _leaving(stats.out_norm, stats.ran == stats.count))),
        Content.styled("  the norm of all its nodes sent to nodes outside it", MUTED),
    ]
    if stats.nonfinite:
        lines.append(Content.styled("⚠ a node in it saw a non-finite gradient", f"bold {ERROR}"))
    if module.children:
        lines += [Content(""), heading("submodules", f"{len(module.children)}")]
        for child in module.children[:SUBMODULES_SHOWN]:
            sub = tree.stats(child)
            norm = format_number(sub.out_norm) if sub.out_norm is not None else "·"
            lines.append(
                bad(
                    line(
                        ("  " + display_name(tree.modules[child]), ACCENT),
                        (f"  {sub.count} nodes  out ", MUTED),
                        norm,
                        (" ⚠" if sub.nonfinite else "", ERROR),
                    )
                )
            )
        if len(module.children) > SUBMODULES_SHOWN:
            lines.append(Content.styled(f"  … {len(module.children) - SUBMODULES_SHOWN} more", MUTED))
    lines += [Content(""), Content.styled("enter or space folds it, → ← open and close", MUTED)]
    return lines


def _leaving(norm: float | None, all_ran: bool) -> str | tuple[str, str]:
    if norm is not None:
        return format_number(norm)
    return ("none: what it sent stayed inside it", MUTED) if all_ran else ("nothing yet", MUTED)
