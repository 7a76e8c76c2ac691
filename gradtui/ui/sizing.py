"""The panes' widths on screen, an object the app owns (`GradtuiApp.sizer`): gradtui.ui.layout
says how wide (by what the panes show and the user's moves, kept in the UI state); this sets
the widths (a style computed at run time, so not in gradtui.tcss) and takes the user's moves
(`<` `>` `-` `+`, a drag of the node list's border).
"""

from __future__ import annotations

from textual.app import App

from gradtui.ui.layout import STEP, PaneSizes
from gradtui.ui.widgets.command_bar import CommandBar
from gradtui.ui.widgets.graph_view import GraphPane
from gradtui.ui.widgets.node_list import NodeList
from gradtui.ui.widgets.variables import DOCKED_WIDTH, VariablesPane


class PaneSizer:
    """Sizes the node list's column and, wide, the graph pane of `app` by `sizes` (see module doc)."""

    def __init__(self, app: App[int], sizes: PaneSizes) -> None:
        self.app = app
        self.sizes = sizes

    def size(self, width: int | None = None) -> None:
        """Size the node list column (and, wide and not zoomed, the graph pane) for a `width`-cell
        terminal (the app's width if None); a style is set only when a width changed, so a step
        lays nothing out. Called again when a pane is zoomed or back (`Z`)."""
        width = width or self.app.size.width
        panes = self.app.screen_stack[0]  # the debugger's, under any modal screen open (P at once)
        left = panes.query_one("#left")
        wanted = self.sizes.left(width, panes.query_one(NodeList).natural_width)
        if left.styles.width is None or left.styles.width.value != wanted:
            left.styles.width = wanted
        graph = panes.query_one(GraphPane)
        # zoomed (Z), the graph pane is as wide as the screen: a width set here would hold it beside the detail
        if panes.query_one("#main").has_class("wide") and panes.maximized is not graph:
            docked = panes.query_one(VariablesPane)  # docked beside the detail (L): its width is not the graph's
            beside = DOCKED_WIDTH if docked.has_class("-docked") and panes.maximized is None else 0
            wanted = self.sizes.graph(width - wanted - beside, graph.natural_width())
            if graph.styles.width is None or graph.styles.width.value != wanted:
                graph.styles.width = wanted
        elif graph.styles.width is not None:
            graph.styles.width = None

    def move_left(self, cells: int) -> None:
        """`<` `>`: move the node list's right edge by `cells` (+: right)."""
        self.sizes.left_moved += cells * STEP
        self.size()

    def move_graph(self, cells: int) -> None:
        """`-` `+`: a wider (+) or narrower graph pane beside the detail pane (the wide layout)."""
        if not self.app.query_one("#main").has_class("wide"):
            self.app.query_one(CommandBar).answer(
                "- + size the graph pane beside the detail pane: a terminal of "
                "160 columns or more; < > size the node list",
                ok=False,
            )
            return
        self.sizes.graph_moved += cells * STEP
        self.size()

    def dragged(self, x: int) -> None:
        """The node list's right border was dragged to column `x`: it follows the pointer."""
        self.sizes.drag_left(self.app.size.width, self.app.query_one(NodeList).natural_width, x)
        self.size()
