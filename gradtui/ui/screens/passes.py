"""The passes screen: plots over passes (loss and gradient norm; a recording's non-finite
counts and per-module norms too), and one row per pass the UI remembers, to jump to one (not
only `[` `]`). The row under the cursor is the plots' cursor (left and right move it too: its
pass's value in their titles); `l` puts the loss and norms on a log scale, `s` smooths them
(TensorBoard's moving average, stepping through its weights), `t` chooses the module or
parameter whose norm the norm plot shows (the debugger's selected node's, or any), `g` opens the
gradients view (several parameters' norms on one plot, a parameter's distribution over passes:
gradtui.ui.screens.gradients). Against a
reference (`--against`), a `differs` column: each pass's largest difference from it."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static

from gradtui.protocol.nodes import node_info
from gradtui.protocol.stats import format_number
from gradtui.ui.fmt import difference_text
from gradtui.ui.screens.gradients import GradientsScreen, StatsReader
from gradtui.ui.screens.plotchoice import PlotChoiceScreen
from gradtui.ui.state import UIState
from gradtui.ui.widgets.plots import SMOOTHING_STEPS, PassPlots, Running

TABLE_ROWS = 7
"""Rows the table keeps at least (its header and six passes): the plots give way to it."""

PLOT_SIZES = {True: (("full", 25), ("short", 15), ("compact", 8)), False: (("full", 12), ("short", 8))}
"""A recording's plots (four) and a live run's (two): each size's class and the rows it takes,
largest first; `compact` is a recording's loss and norm alone, side by side (gradtui.tcss)."""

AROUND = 5
"""Rows of the passes box that are neither plots nor table: its border, the note, two margins."""

FOOTER = 1
"""Rows of the screen's footer (its keys), under the passes box."""


def plot_size(height: int, recording: bool) -> str:
    """The largest size of the plots that leaves the table TABLE_ROWS rows in a terminal
    `height` rows high (the passes box is at most 90% of what the footer leaves), else `hidden`."""
    rows = (height - FOOTER) * 9 // 10 - AROUND
    return next((name for name, taken in PLOT_SIZES[recording] if rows - taken >= TABLE_ROWS), "hidden")


COLUMNS = ("pass", "loss", "nodes", "hits", "non-finite", "call")
"""The table's columns; against a reference (`--against`) `differs` comes before `call`: the
pass's largest relative difference from the reference."""


def _differs(relative: float | None) -> Text:
    """A pass's largest difference from the reference, bold when it is not 0."""
    return Text(difference_text(relative), style="bold yellow" if relative else "dim")


def kept_text(indices: list[int]) -> str:
    """Which passes' node data the UI keeps, said as it is: `node data kept for pass 0`,
    `... for passes 3–9`, `... for passes 0, 4, 7`, `... for 6 passes (0–12)`."""
    if not indices:
        return "no node data kept"
    first, last = indices[0], indices[-1]
    if len(indices) == 1:
        which = f"pass {first}"
    elif last - first + 1 == len(indices):
        which = f"passes {first}–{last}"
    elif len(indices) <= 4:
        which = "passes " + ", ".join(str(i) for i in indices)
    else:
        which = f"{len(indices)} passes ({first}–{last})"
    return f"node data kept for {which}"


class PassTable(DataTable):
    """A DataTable where one click on a row chooses it (a DataTable chooses only a row already
    under the cursor, which takes a second click), and whose cursor row is in view once it has a
    size (the cursor is set on mount, before the screen is laid out: a scroll then went nowhere,
    and the pass on screen was off the bottom of the table). Left and right move the row too:
    the plots' cursor follows the row, and on a plot a pass is left or right of another."""

    BINDINGS = [
        Binding("left", "cursor_up", "earlier pass", show=False),
        Binding("right", "cursor_down", "later pass", show=False),
    ]

    def on_resize(self) -> None:
        """Scroll the cursor's row into view at the table's new size."""
        self.call_after_refresh(self._scroll_cursor_into_view)

    async def _on_click(self, event: events.Click) -> None:
        await super()._on_click(event)
        row = event.style.meta.get("row")
        if isinstance(row, int) and row >= 0 and self.cursor_row == row:
            self.action_select_cursor()


class PassesScreen(Screen[int | None]):
    """Every pass summary kept, newest last; enter or a click shows that pass, escape closes.

    A screen of its own, not a modal one: a modal draws the debugger under it, dimmed, in every
    frame (0.1-0.2 s more to open it beside a recording's four plots)."""

    BINDINGS = [
        Binding("enter", "show", "show it", priority=True),  # priority: shown, not the table's
        Binding("escape,q,P", "close", "close"),
        Binding("l", "log_scale", "log scale"),
        Binding("s", "smoothing", "smoothing"),
        Binding("t", "choose_plot", "plot of…"),
        # not in the footer yet: it would redraw every passes-view snapshot (docs name it)
        Binding("g", "gradients", "gradients", show=False),
    ]

    log_scale: reactive[bool] = reactive(False, init=False)
    """The plots' loss and norms on a log scale."""
    cursor_pass: reactive[int | None] = reactive(None, init=False)
    """The pass of the table's highlighted row: the plots mark it and read its value."""
    smoothing: reactive[float] = reactive(0.0, init=False)
    """The plots' smoothing weight (0: raw values)."""
    chosen: reactive[str | None] = reactive(None, init=False)
    """The module or parameter the norm plot shows (None: all parameters together)."""

    def __init__(
        self, state: UIState, recording: bool = False, node: int | None = None, param_stats: StatsReader | None = None
    ) -> None:
        """`recording`: the passes of a recording (every plot), else of a live run (loss, norm);
        `node`: the node selected in the debugger (`t` offers its parameter or module);
        `param_stats`: reads a recording's gradient statistics of one parameter (`g`'s view)."""
        super().__init__()
        self.param_stats = param_stats
        self.state = state
        self.recording = recording
        self.node = node
        self.indices: list[int] = []
        """Pass index of each table row."""
        self._chosen = False

    def compose(self) -> ComposeResult:
        """A note line, then the table."""
        with Vertical(id="passes") as box:
            box.border_title = f"passes · {self.state.passes} run"
            box.border_subtitle = "enter: show · ←→ cursor · l log · s smooth · t plot of… · escape back"
            plots = PassPlots(self.state.series, self.recording)
            live = self.state.live
            if live is not None and not live.finished:  # its loss is known, its norms when it ends
                plots.in_flight = Running(live.index, live.losses[0] if live.losses else None)
            yield plots
            yield Static(self._note(), id="passes-note", markup=False)
            yield PassTable(id="passes-table", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def _note(self) -> str:
        shown = len(self.state.summaries)
        if self.recording:
            recorded = sum(summary.recorded and summary.kept for summary in self.state.summaries)
            return f"{shown} passes listed · {recorded} with per-node data · unhooked: loss and flow only"
        # Only the passes that were hooked have node data: a view kept of an unhooked one has none.
        kept = sorted(view.index for view in self.state.views if view.recorded)
        return f"{shown} passes · {kept_text(kept)} · unhooked: loss and flow only"

    def on_mount(self) -> None:
        """Fill the table, the cursor on the pass on screen."""
        self._fit(self.app.size.height)
        table = self.query_one(DataTable)
        against = any(summary.against for summary in self.state.summaries)
        table.add_columns(*COLUMNS[:-1], *(("differs",) if against else ()), COLUMNS[-1])
        kept = {v.index for v in self.state.views}
        shown = self.state.view.index if self.state.view is not None else None
        cursor = 0
        for summary in self.state.summaries:
            live = self.state.live is not None and summary.index == self.state.live.index
            if live and self.state.live is not None:
                summary = self.state.live.summary()  # the live pass's summary moves on
            losses = [format_number(v) for v in summary.losses if v is not None]
            if not summary.recorded:
                nodes = Text("unhooked", style="dim")
            elif not summary.drawn:  # ran while the UI drew an earlier pass: sent without its graph
                nodes = Text(f"{summary.nodes} · not drawn", style="dim")
            elif not summary.kept:  # hooked in the run, its node statistics not recorded (--flight)
                nodes = Text(f"{summary.nodes} · not kept", style="dim")
            elif summary.index in kept or self.recording:  # a recording has every pass's (enter asks it)
                nodes = Text(str(summary.nodes))
            else:
                nodes = Text(f"{summary.nodes} (dropped)", style="dim")
            hits = self.state.hits.get(summary.index, 0)
            bad = summary.nonfinite
            table.add_row(
                Text(f"{summary.index}" + (" ▶" if summary.index == shown else ""), style="bold"),
                Text(", ".join(losses) or "-"),
                nodes,
                Text(str(hits) if hits else "-", style="bold yellow" if hits else "dim"),
                Text(str(bad) if bad else "-", style="bold red" if bad else "dim"),
                *((_differs(summary.difference),) if against else ()),
                Text(
                    summary.call_text + (f" · {summary.error}" if summary.error else ""),
                    style="red" if summary.error else "dim",
                ),
            )
            self.indices.append(summary.index)
            if summary.index == shown:
                cursor = len(self.indices) - 1
        table.move_cursor(row=cursor, animate=False)
        table.focus()

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        """A row under the cursor: the plots' cursor on its pass."""
        event.stop()
        if 0 <= event.cursor_row < len(self.indices):
            self.cursor_pass = self.indices[event.cursor_row]

    def action_log_scale(self) -> None:
        """`l`: the plots' loss and norms on a log scale, or back."""
        self.log_scale = not self.log_scale

    def action_smoothing(self) -> None:
        """`s`: the next smoothing weight (0, 0.6, 0.9, 0.99, then raw again)."""
        at = SMOOTHING_STEPS.index(self.smoothing) if self.smoothing in SMOOTHING_STEPS else 0
        self.smoothing = SMOOTHING_STEPS[(at + 1) % len(SMOOTHING_STEPS)]

    def watch_smoothing(self, weight: float) -> None:
        """Tell the plots their smoothing."""
        plots = self.query_one(PassPlots)
        plots.smoothing = weight
        plots.replot()

    def action_choose_plot(self) -> None:
        """`t`: choose the module or parameter the norm plot shows."""
        view, series = self.state.view, self.state.series
        data = (
            node_info(view.graph, self.node)
            if view is not None and self.node is not None and self.node in view.graph
            else None
        )
        selected = series.subject(data.param if data else None, data.module if data else None)
        self.app.push_screen(PlotChoiceScreen(series.choices(), selected, self.chosen), self._plot_chosen)

    def action_gradients(self) -> None:
        """`g`: the gradients view, the norm plot's parameter (else the selected node's) chosen."""
        view, series = self.state.view, self.state.series
        node = self.node
        data = node_info(view.graph, node) if view is not None and node is not None and node in view.graph else None
        first = self.chosen or series.subject(data.param if data else None, data.module if data else None)
        self.app.push_screen(
            GradientsScreen(series, [first] if first else None, self.param_stats), lambda _: self._focus_table()
        )

    def _focus_table(self) -> None:
        """Back from a view over this one: the table has the keys again."""
        self.query_one(DataTable).focus()

    def _plot_chosen(self, name: str | None) -> None:
        if name is not None:
            self.chosen = name or None
        self.query_one(DataTable).focus()

    def watch_chosen(self, name: str | None) -> None:
        """Tell the plots what the norm plot shows."""
        plots = self.query_one(PassPlots)
        plots.chosen = name
        plots.replot()

    def watch_log_scale(self, log: bool) -> None:
        """Tell the plots their scale."""
        plots = self.query_one(PassPlots)
        plots.log_scale = log
        plots.replot()

    def watch_cursor_pass(self, index: int | None) -> None:
        """Tell the plots their cursor."""
        plots = self.query_one(PassPlots)
        plots.cursor = index
        plots.replot()

    def on_resize(self, event: events.Resize) -> None:
        """Give the plots the room the table leaves at the new size."""
        self._fit(event.size.height)

    def _fit(self, height: int) -> None:
        plots = self.query_one(PassPlots)
        size = plot_size(height, self.recording)
        for name in ("full", "short", "compact", "hidden"):
            plots.set_class(name == size, name)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a row: show that pass."""
        event.stop()
        self._choose(event.cursor_row)

    def action_show(self) -> None:
        """enter: show the pass under the cursor."""
        if self.indices:
            self._choose(self.query_one(DataTable).cursor_row)

    def _choose(self, row: int) -> None:
        if not self._chosen:
            self._chosen = True
            self.dismiss(self.indices[row])

    def action_close(self) -> None:
        """Back to the debugger."""
        self.dismiss(None)
