"""The detail pane: everything known about the selected node, as a few short sections."""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import ComposeResult
from textual.content import Content

from gradtui.model.nodes import node_info
from gradtui.model.stats import Stats, format_number
from gradtui.ui import fmt
from gradtui.ui.flowtable import flow_rows
from gradtui.ui.modtree import ModuleTree, display_name
from gradtui.ui.state import Grads, PassView, UIState
from gradtui.ui.widgets.body import Body, BodyPane, node_ref
from gradtui.ui.widgets.source import source_block, source_row, warm_highlighter

LEAVES_SHOWN = 12
"""At most this many leaf gradients are listed at the end of a pass."""

SUBMODULES_SHOWN = 8
"""At most this many submodules are listed for a module row."""

MUTED, KEY, ERROR, WARN, OK, ACCENT = "$text-muted", "bold", "$text-error", "$text-warning", "$text-success", "$text-accent"


def _line(*parts: str | tuple[str, str]) -> Content:
    return Content.assemble(*parts)


def _bad(line: Content) -> Content:
    """Non-finite numbers (`nan`, `inf`, `-inf`) in the error colour."""
    return line.highlight_regex(r"-?\b(nan|inf)\b", style=f"bold {ERROR}")


def saved_text(saved: tuple[str, ...]) -> str:
    """The saved values worth reading: tensors first, then scalars; no `*_sym_*` metadata, no None."""
    useful = [item for item in saved if "_sym_" not in item.split(" ", 1)[0]
              and not item.endswith(("= None", "= ()"))]
    tensors = [item for item in useful if " [" in item]
    return "  ".join(tensors + [item for item in useful if item not in tensors])


def _heading(text: str, note: str = "", note_style: str = MUTED) -> Content:
    return _line((text, "bold $text-primary"), ("  " + note if note else "", note_style))


class DetailPane(BodyPane):
    """Shows one node: op, names, source, the gradient arriving, what it sent on, neighbours."""

    def __init__(self, state: UIState, home: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        self.state = state
        self.home = home
        """The script's folder: paths in tracebacks are shown relative to it."""
        self.node: int | None = None
        self._compact = False

    @property
    def compact(self) -> bool:
        """The 80x24 layout: the source line right under the labels, without context lines."""
        return self._compact

    @compact.setter
    def compact(self, value: bool) -> None:
        if value != self._compact:
            self._compact = value
            if self.node is not None:
                self.show(self.node)

    def compose(self) -> ComposeResult:
        """One Body holds the text."""
        yield Body(id="detail-body")

    def on_mount(self) -> None:
        """Warm the highlighter in a thread, so that the first pause does not wait for it."""
        self.run_worker(warm_highlighter, name="warm-highlighter", thread=True, exit_on_error=False)

    def show(self, node: int | None) -> None:
        """Show `node` (None: whatever the state says, e.g. before the first pass)."""
        self.node = node
        view = self.state.view
        if view is not None and not view.recorded:
            note = " · ".join(filter(None, (view.loss_text(), "nothing could stop in it: no per-node statistics")))
            lines = list(self._script_end())  # at the end of a run, its story first
            lines += [Content("")] if lines else []
            lines.append(_heading(f"pass {view.index} ran unhooked", note))
            if not view.finished:
                lines.append(Content.styled("its leaf gradients and flow are measured when it ends", MUTED))
            elif view.leaf_grads or view.flow:
                lines += list(self._pass_end(view))[1:]  # its heading says what the one above does
            self._draw(f"pass {view.index}", Content("\n").join(lines))
            return
        if view is None or node is None or node not in view.graph:
            end = list(self._script_end())
            body = Content("\n").join(end) if end else Content.styled("waiting for the first backward pass…", MUTED)
            self._draw("detail", body)
            return
        data = node_info(view.graph, node)
        title = view.title(node) + (f" · {data.source}" if data.source else "")
        lines: list[Content] = []
        after = node == self.state.current and self.state.paused is not None and self.state.paused.phase == "after"
        flow = ((self._outgoing, self._incoming, self._over_passes) if after
                else (self._incoming, self._over_passes, self._outgoing))
        for section in (self._failure, self._about, *flow, self._source, self._neighbours, self._leaf):
            part = list(section(view, node))
            if part:
                if lines:
                    lines.append(Content(""))
                lines.extend(part)
        end = list(self._pass_end(view)) + list(self._script_end())
        if end:
            lines += [Content(""), *end]
        self._draw(title, Content("\n").join(lines))

    def show_module(self, tree: ModuleTree, path: str) -> None:
        """Sum up a module row of the module view."""
        self.node = None
        module, stats = tree.modules[path], tree.stats(path)
        lines = [
            _line(("module ", MUTED), (path, KEY)),
            _line(("nodes ", MUTED), str(stats.count), ("  ran ", MUTED), str(stats.ran),
                  ("  direct ", MUTED), str(len(module.nodes))),
            _bad(_line(("gradient leaving it ", MUTED), self._leaving(stats.out_norm, stats.ran == stats.count))),
            Content.styled("  the norm of all its nodes sent to nodes outside it", MUTED),
        ]
        if stats.nonfinite:
            lines.append(Content.styled("⚠ a node in it saw a non-finite gradient", f"bold {ERROR}"))
        if module.children:
            lines += [Content(""), _heading("submodules", f"{len(module.children)}")]
            for child in module.children[:SUBMODULES_SHOWN]:
                sub = tree.stats(child)
                norm = format_number(sub.out_norm) if sub.out_norm is not None else "·"
                lines.append(_bad(_line(("  " + display_name(tree.modules[child]), ACCENT),
                                        (f"  {sub.count} nodes  out ", MUTED), norm,
                                        (" ⚠" if sub.nonfinite else "", ERROR))))
            if len(module.children) > SUBMODULES_SHOWN:
                lines.append(Content.styled(f"  … {len(module.children) - SUBMODULES_SHOWN} more", MUTED))
        lines += [Content(""), Content.styled("enter or space folds it, → ← open and close", MUTED)]
        self._draw(f"module {path}", Content("\n").join(lines))

    @staticmethod
    def _leaving(norm: float | None, all_ran: bool) -> str | tuple[str, str]:
        if norm is not None:
            return format_number(norm)
        return ("none: what it sent stayed inside it", MUTED) if all_ran else ("nothing yet", MUTED)

    def on_resize(self) -> None:
        """Source lines are cut to the width: redraw, once the new width is laid out."""
        if self.node is not None:
            self.call_after_refresh(self._reshow)

    def _reshow(self) -> None:
        if self.node is not None:
            self.show(self.node)

    # ---- sections ------------------------------------------------------------------------

    def _failure(self, view: PassView, node: int) -> Iterable[Content]:
        if view.failed_node != node:
            return
        yield _line(("✗ the backward failed here: ", f"bold {ERROR}"), (view.error or "", ERROR))
        if self.state.traceback:
            for text in fmt.user_traceback(self.state.traceback, self.home).rstrip().splitlines():
                yield Content.styled(text, ERROR)

    def _about(self, view: PassView, node: int) -> Iterable[Content]:
        data = node_info(view.graph, node)
        paused = self.state.paused if node == self.state.current else None
        if node == view.failed_node:
            where = ("✗ raised while running", ERROR)
        elif paused is not None:
            where = ("▶ paused here, before it runs" if paused.phase == "before" and not self.compact
                     else "▶ paused here" if paused.phase == "before" else "▶ paused after it ran", WARN)
        elif node in view.ran:
            where = (f"✓ ran {view.ran[node]} of {view.total}", OK)
        else:
            where = ("pending", MUTED)
        kind = [("  kind ", MUTED), data.kind] if data.kind != "op" else []
        yield _line(("op ", MUTED), (data.name, KEY), *kind, "  ", where)
        if paused is not None and paused.reason != "step":
            yield _line(("why ", MUTED), (paused.reason, WARN))
        names = [("labels ", MUTED), (", ".join(data.labels) or "—", ACCENT)]
        if data.param:
            names += [("  param ", MUTED), (data.param, ACCENT)]
        if data.module:
            names += [("  module ", MUTED), data.module]
        yield _line(*names)
        if self.compact:
            yield from self._source_line(data)

    def _source_line(self, data: dict) -> Iterable[Content]:
        """`at demo.py:24 │ loss = ((prediction - target) ** 2).mean()`: the line, one row."""
        yield from source_row(data, self.scrollable_content_region.width)

    def _source(self, view: PassView, node: int) -> Iterable[Content]:
        """The node's source line with a few lines around, highlighted, the line marked; its saved values."""
        data = node_info(view.graph, node)
        lines = [] if self.compact else source_block(data, self.scrollable_content_region.width)
        if lines:
            yield _heading("source", data.source or "")
            yield from lines
        saved = saved_text(data.saved)
        if saved:
            yield _line(("saved ", MUTED), saved)

    def _over_passes(self, view: PassView, node: int) -> Iterable[Content]:
        """A sparkline of this node's incoming norm over the last recorded passes (same id and op)."""
        name = node_info(view.graph, node).name
        series = [(index, norm) for index, norm in self.state.norms.series(node, name) if index <= view.index]
        if len(series) < 2:
            return
        norms = [norm for _, norm in series]
        known = [n for n in norms if n is not None]
        low = format_number(min(known)) if known else "-"
        high = format_number(max(known)) if known else "-"
        room = max(8, self.scrollable_content_region.width - len(low) - len(high) - 12)
        bars = fmt.series_sparkline(norms[-room:])
        yield _heading("incoming norm over passes",
                       f"passes {series[-room:][0][0]}–{series[-1][0]} · #{node} {name} in each")
        yield _bad(_line(("  min ", MUTED), low, " ", (bars, ACCENT), " ", high, (" max", MUTED)))

    def _incoming(self, view: PassView, node: int) -> Iterable[Content]:
        data = node_info(view.graph, node)
        grads = view.grad_outputs.get(node)
        of = ", ".join(data.tags)
        note = f"grad of {of}" if of else ""
        edits = view.edits.get(node, [])
        if edits:
            note += ("  · " if note else "") + "edited: " + ", ".join(cmd for cmd, _ in edits)
        yield _heading("incoming gradient", note, WARN if edits else MUTED)
        if grads is None:
            failed = node == view.failed_node
            yield Content.styled("  not known: the node raised before it finished" if failed else "  not arrived yet", MUTED)
            return
        hist = view.grad_outputs_hist.get(node)
        yield from self._grads(grads, hist, "in")
        if edits:
            before = edits[0][1]
            arrived = view.arrived_hist.get(node)
            if hist is None and arrived is not None:
                # the edit's summary has no histogram or values: keep the ones it arrived with
                yield Content.styled("  as it arrived, before the edit:", MUTED)
                yield from self._grads(arrived, arrived, "in")
            else:
                yield _line(("  before the edit: ", MUTED), "; ".join(fmt.one_line(s) for s in before))

    def _outgoing(self, view: PassView, node: int) -> Iterable[Content]:
        grads = view.grad_inputs.get(node)
        if grads is None:
            return
        targets = {slot: nxt for _, nxt, slot in view.graph.out_edges(node, data="slot")}
        hist = view.grad_inputs_hist.get(node)
        yield _heading("outgoing gradients", "what it sent on to its inputs")
        for slot, stats in enumerate(grads):
            target = targets.get(slot)
            to = (node_ref(Content.styled(view.title(target), ACCENT), target) if target is not None
                  else Content.styled("(no input)", ACCENT))
            yield _line(("  → ", MUTED), to)
            yield from self._grad(stats, hist[slot] if hist is not None and slot < len(hist) else None, "    ")

    def _neighbours(self, view: PassView, node: int) -> Iterable[Content]:
        """Its inputs and consumers, each a click away (`node_ref`)."""
        def refs(nodes: Iterable[int], none: str) -> Content:
            titles = [node_ref(Content.styled(view.title(n), ACCENT), n) for n in nodes]
            return Content("  ").join(titles) if titles else Content.styled(none, MUTED)

        yield _line(("↓ inputs (gradient goes to)  ", MUTED), refs(view.graph.successors(node), "none: a leaf"))
        yield _line(("↑ consumers (comes from)     ", MUTED), refs(view.graph.predecessors(node), "none: the root"))

    def _leaf(self, view: PassView, node: int) -> Iterable[Content]:
        if node not in view.leaf_grads:
            return
        data = node_info(view.graph, node)
        name = data.param or (data.labels[0] if data.labels else "leaf")
        yield _heading(f"{name}.grad after the pass")
        yield from self._grad(view.leaf_grads[node], None, "  ")

    def _pass_end(self, view: PassView) -> Iterable[Content]:
        if not view.finished:
            return
        state = "failed" if view.error else "finished"
        ran = f"{view.done}/{view.total} nodes ran" if view.recorded else "ran unhooked"
        yield _heading(f"pass {view.index} {state}", " · ".join(filter(None, (view.loss_text(), ran))))
        if not view.leaf_grads and view.flow:
            yield from self._flow_leaves(view)
            return
        leaves = list(view.leaf_grads.items())
        for leaf, stats in leaves[:LEAVES_SHOWN]:
            data = node_info(view.graph, leaf)
            name = data.param or ", ".join(data.labels) or f"#{leaf}"
            yield _line((f"  {name}.grad ", ACCENT), (f"#{leaf} ", MUTED), fmt.one_line(stats) if stats else ("None", WARN))
        if len(leaves) > LEAVES_SHOWN:
            yield Content.styled(f"  … {len(leaves) - LEAVES_SHOWN} more leaves", MUTED)

    def _flow_leaves(self, view: PassView) -> Iterable[Content]:
        """Leaf gradients of a pass without node statistics, from its flow: norm, weight, flag."""
        rows = flow_rows(view.flow)
        yield Content.styled("  leaf gradients · w: the flow table", MUTED)
        for row in rows[:LEAVES_SHOWN]:
            flow = row.flow
            shape = "×".join(str(d) for d in flow.shape) or "scalar"
            grad = format_number(flow.grad_norm) if flow.grad_norm is not None else "None"
            flag = (f"  {row.flag}", WARN if row.flag not in ("zero weight", "no grad") else MUTED) if row.flag else ""
            yield _bad(_line((f"  {flow.name}.grad ", ACCENT), (f"[{shape}] ", MUTED), ("norm ", MUTED), grad, flag))
        if len(rows) > LEAVES_SHOWN:
            yield Content.styled(f"  … {len(rows) - LEAVES_SHOWN} more leaves (w)", MUTED)

    def _script_end(self) -> Iterable[Content]:
        """The story of a run that ended: how, how many passes, the last pass, where to look."""
        state = self.state
        if not state.script_over:
            return
        if state.status == "quit":
            yield _heading("script stopped", "you quit")
            return
        if state.passes == 0:
            yield Content.styled("the script never called backward() or torch.autograd.grad()", WARN)
        style = OK if state.status == "finished" else ERROR
        passes = f"  · {state.passes} pass{'es' if state.passes != 1 else ''} run" if state.passes else ""
        yield _line(("script ", "bold $text-primary"), (f"{state.status} · exit status {state.exit_status}", style),
                    (passes, MUTED))
        if state.traceback and (state.view is None or state.view.failed_node is None):
            for text in fmt.user_traceback(state.traceback, self.home).rstrip().splitlines():
                yield Content.styled(text, ERROR)
        live, shown = state.live, state.view
        if live is not None and shown is not live:
            yield _line(("last pass ", MUTED), str(live.index), ("  " + live.loss_text(), MUTED),
                        ("  ] goes back to it", MUTED))
        hooked = state.last_recorded
        if hooked is not None and hooked is not shown:
            yield Content.styled(f"pass {hooked.index} has per-node statistics: P lists the passes, "
                                 f"[ ] browse them", MUTED)
        elif hooked is None and state.passes:
            yield Content.styled("no kept pass has per-node statistics: rerun with --record-all, "
                                 "or a breakpoint, to step through one", MUTED)

    # ---- gradients -----------------------------------------------------------------------

    def _grads(self, grads: Grads, hist: Grads | None, label: str) -> Iterable[Content]:
        for i, stats in enumerate(grads):
            if len(grads) > 1:
                yield Content.styled(f"  {label}[{i}]", MUTED)
            yield from self._grad(stats, hist[i] if hist is not None and i < len(hist) else None, "  ")

    def _grad(self, stats: Stats | None, hist: Stats | None, indent: str) -> Iterable[Content]:
        """Shape; norm, mean, non-finite; min, histogram, max; the first values."""
        if stats is None:
            yield _line(indent, ("None (no gradient)", MUTED))
            return
        yield _line(indent, (fmt.shape_text(stats), KEY))
        if stats.min is None:  # light stats: the node ran while the engine was running on
            yield _bad(_line(indent, ("norm ", MUTED), format_number(stats.norm), ("  non-finite ", MUTED),
                             (str(stats.nonfinite), f"bold {ERROR}" if stats.nonfinite else OK)))
            yield _line(indent, ("min max mean: recorded when stepping or with --report", MUTED))
            return
        yield _bad(_line(indent, ("norm ", MUTED), format_number(stats.norm), ("  mean ", MUTED),
                         format_number(stats.mean), ("  non-finite ", MUTED),
                         (str(stats.nonfinite), f"bold {ERROR}" if stats.nonfinite else OK)))
        bars = fmt.sparkline(hist.histogram) if hist is not None and hist.histogram else ""
        low, high = format_number(stats.min), format_number(stats.max)
        if bars and stats.numel > fmt.PREVIEW_LIMIT:
            note = "  (finite values)" if stats.nonfinite else ""
            # 10 for "min ", " max" and two spaces; 2 more in case a scrollbar appears later
            room = self.scrollable_content_region.width - len(indent) - len(low) - len(high) - 12 - len(note)
            if room >= 2 * len(bars):
                bars = "".join(bar * 2 for bar in bars)
            if room >= len(bars):
                yield _bad(_line(indent, ("min ", MUTED), low, " ", (bars, ACCENT), " ", high, (" max" + note, MUTED)))
            else:  # narrow: numbers, then the histogram on its own line
                yield _bad(_line(indent, ("min ", MUTED), low, ("  max ", MUTED), high))
                yield _line(indent, (bars, ACCENT), (note, MUTED))
        else:
            yield _bad(_line(indent, ("min ", MUTED), low, ("  max ", MUTED), high))
        if stats.values or stats.preview or not stats.numel:  # no values known: no `[… 512 more]`
            yield _bad(_line(indent, ("values ", MUTED), fmt.values_text(stats)))
