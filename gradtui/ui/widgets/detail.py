"""The detail pane: everything known about the selected node, as a few short sections."""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from gradtui.core.summary import Stats, format_number
from gradtui.ui import fmt
from gradtui.ui.state import Grads, PassView, UIState

LEAVES_SHOWN = 12
"""At most this many leaf gradients are listed at the end of a pass."""

MUTED, KEY, ERROR, WARN, OK, ACCENT = "$text-muted", "bold", "$text-error", "$text-warning", "$text-success", "$text-accent"


def _line(*parts: str | tuple[str, str]) -> Content:
    return Content.assemble(*parts)


def _heading(text: str, note: str = "", note_style: str = MUTED) -> Content:
    return _line((text, "bold $text-primary"), ("  " + note if note else "", note_style))


class DetailPane(VerticalScroll):
    """Shows one node: op, names, source, the gradient arriving, what it sent on, neighbours."""

    def __init__(self, state: UIState, home: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.state = state
        self.home = home
        """The script's folder: paths in tracebacks are shown relative to it."""
        self.node: int | None = None

    def compose(self) -> ComposeResult:
        """One Static holds the text."""
        yield Static(id="detail-body")

    def show(self, node: int | None) -> None:
        """Show `node` (None: whatever the state says, e.g. before the first pass)."""
        self.node = node
        view = self.state.view
        if view is None or node is None or node not in view.graph:
            self.border_title = "detail"
            end = list(self._script_end())
            body = Content("\n").join(end) if end else Content.styled("waiting for the first backward pass…", MUTED)
            self.query_one("#detail-body", Static).update(body)
            return
        data = view.graph.nodes[node]
        title = view.title(node) + (f" · {data['source']}" if data["source"] else "")
        self.border_title = title
        lines: list[Content] = []
        for section in (self._failure, self._about, self._source, self._incoming, self._outgoing,
                        self._neighbours, self._leaf):
            part = list(section(view, node))
            if part:
                if lines:
                    lines.append(Content(""))
                lines.extend(part)
        end = list(self._pass_end(view)) + list(self._script_end())
        if end:
            lines += [Content(""), *end]
        self.query_one("#detail-body", Static).update(Content("\n").join(lines))

    # ---- sections ------------------------------------------------------------------------

    def _failure(self, view: PassView, node: int) -> Iterable[Content]:
        if view.failed_node != node:
            return
        yield _line(("✗ the backward failed here: ", f"bold {ERROR}"), (view.error or "", ERROR))
        if self.state.traceback:
            for text in fmt.user_traceback(self.state.traceback, self.home).rstrip().splitlines():
                yield Content.styled(text, ERROR)

    def _about(self, view: PassView, node: int) -> Iterable[Content]:
        data = view.graph.nodes[node]
        if node == self.state.current:
            phase = self.state.paused.phase if self.state.paused else "before"
            where = ("▶ paused before it runs", WARN) if phase == "before" else ("▶ paused after it ran", WARN)
        elif node in view.ran:
            where = (f"✓ ran {view.ran[node]} of {view.total}", OK)
        else:
            where = ("pending", MUTED)
        yield _line(("op ", MUTED), (data["name"], KEY), ("  kind ", MUTED), data["kind"], "  ", where)
        names = [("labels ", MUTED), (", ".join(data["labels"]) or "—", ACCENT)]
        if data["param"]:
            names += [("  param ", MUTED), (data["param"], ACCENT)]
        if data["module"]:
            names += [("  module ", MUTED), data["module"]]
        yield _line(*names)
        if data["saved"]:
            yield _line(("saved ", MUTED), "  ".join(data["saved"]))

    def _source(self, view: PassView, node: int) -> Iterable[Content]:
        data = view.graph.nodes[node]
        lines = fmt.source_lines(data["path"], data["line"])
        if not lines:
            return
        width = len(str(lines[-1][0]))
        for number, text, here in lines:
            yield _line(("▶ " if here else "  ", WARN), (f"{number:>{width}} │ ", MUTED),
                        (text, "bold" if here else MUTED))

    def _incoming(self, view: PassView, node: int) -> Iterable[Content]:
        data = view.graph.nodes[node]
        grads = view.incoming.get(node)
        of = ", ".join([*data["labels"], *([data["param"]] if data["param"] else [])])
        note = f"grad of {of}" if of else ""
        edits = view.edits.get(node, [])
        if edits:
            note += ("  · " if note else "") + "edited: " + ", ".join(cmd for cmd, _ in edits)
        yield _heading("incoming gradient", note, WARN if edits else MUTED)
        if grads is None:
            yield Content.styled("  not arrived yet", MUTED)
            return
        hist = view.incoming_hist.get(node)
        yield from self._grads(grads, hist, "in")
        if edits:
            before = edits[0][1]
            yield _line(("  before the edit: ", MUTED), "; ".join(fmt.one_line(s) for s in before))

    def _outgoing(self, view: PassView, node: int) -> Iterable[Content]:
        grads = view.outgoing.get(node)
        if grads is None:
            return
        targets = {slot: nxt for _, nxt, slot in view.graph.out_edges(node, data="slot")}
        yield _heading("outgoing gradients", "sent on to its inputs")
        hist = view.outgoing_hist.get(node)
        if hist is not None:
            yield from self._grads(grads, hist, "out")
            return
        for slot, stats in enumerate(grads):
            target = targets.get(slot)
            to = view.title(target) if target is not None else "(no input)"
            yield _line(("  → ", MUTED), (to, ACCENT))
            yield self._stats_line(stats, "    ")

    def _neighbours(self, view: PassView, node: int) -> Iterable[Content]:
        inputs = [view.title(n) for n in view.graph.successors(node)]
        consumers = [view.title(n) for n in view.graph.predecessors(node)]
        yield _line(("↓ inputs (gradient goes to)  ", MUTED), ("  ".join(inputs) or "none: a leaf", ACCENT))
        yield _line(("↑ consumers (comes from)     ", MUTED), ("  ".join(consumers) or "none: the root", ACCENT))

    def _leaf(self, view: PassView, node: int) -> Iterable[Content]:
        if node not in view.leaf_grads:
            return
        data = view.graph.nodes[node]
        name = data["param"] or (data["labels"][0] if data["labels"] else "leaf")
        yield _heading(f"{name}.grad after the pass")
        yield self._stats_line(view.leaf_grads[node], "  ")

    def _pass_end(self, view: PassView) -> Iterable[Content]:
        if not view.finished:
            return
        state = "failed" if view.error else "finished"
        yield _heading(f"pass {view.index} {state}", f"{view.done}/{view.total} nodes ran",)
        leaves = list(view.leaf_grads.items())
        for leaf, stats in leaves[:LEAVES_SHOWN]:
            data = view.graph.nodes[leaf]
            name = data["param"] or ", ".join(data["labels"]) or f"#{leaf}"
            yield _line((f"  {name}.grad ", ACCENT), (f"#{leaf} ", MUTED), fmt.one_line(stats) if stats else ("None", WARN))
        if len(leaves) > LEAVES_SHOWN:
            yield Content.styled(f"  … {len(leaves) - LEAVES_SHOWN} more leaves", MUTED)

    def _script_end(self) -> Iterable[Content]:
        state = self.state
        if not state.script_over:
            return
        if state.status == "quit":
            yield _heading("script stopped", "you quit")
            return
        style = OK if state.status == "finished" else ERROR
        yield _line(("script ", "bold $text-primary"), (f"{state.status} · exit status {state.exit_status}", style))
        if state.traceback and (state.view is None or state.view.failed_node is None):
            for text in fmt.user_traceback(state.traceback, self.home).rstrip().splitlines():
                yield Content.styled(text, ERROR)

    # ---- gradients -----------------------------------------------------------------------

    def _grads(self, grads: Grads, hist: Grads | None, label: str) -> Iterable[Content]:
        for i, stats in enumerate(grads):
            prefix = f"  {label}[{i}] " if len(grads) > 1 else "  "
            if stats is None:
                yield _line(prefix, ("None (no gradient)", MUTED))
                continue
            yield _line(prefix, (fmt.shape_text(stats), KEY))
            yield self._stats_line(stats, "  ", shape=False)
            h = hist[i] if hist is not None and i < len(hist) else None
            if h is not None and h.histogram and stats.numel > fmt.PREVIEW_LIMIT:
                span = ("  finite values only" if h.nonfinite
                        else f"  {format_number(h.min)} … {format_number(h.max)}")
                yield _line("  ", (fmt.sparkline(h.histogram), ACCENT), (span, MUTED))
            yield _line(("  values ", MUTED), fmt.values_text(stats))

    @staticmethod
    def _stats_line(stats: Stats | None, indent: str, shape: bool = True) -> Content:
        if stats is None:
            return _line(indent, ("None", MUTED))
        parts: list[str | tuple[str, str]] = [indent]
        if shape:
            parts += [(fmt.shape_text(stats), KEY), "  "]
        parts.append(fmt.numbers_text(stats))
        parts.append(("  non-finite ", MUTED))
        parts.append((str(stats.nonfinite), ERROR if stats.nonfinite else OK))
        return _line(*parts)
