"""The detail pane: everything known about the selected node, as a few short sections. The pane
picks what to show and draws it; the words are its renderers': the node's sections
(`node_sections.NodeSections`, the statistics in `grad_stats`), the run's story and a module
row's summary (`run_story`).
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.content import Content

from gradtui.protocol.nodes import node_info
from gradtui.ui.modtree import ModuleTree
from gradtui.ui.state import UIState
from gradtui.ui.widgets.body import Body, BodyPane
from gradtui.ui.widgets.detail_text import MUTED
from gradtui.ui.widgets.node_sections import NodeSections
from gradtui.ui.widgets.run_story import RunStory, module_summary
from gradtui.ui.widgets.source import warm_highlighter


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
        view, story = self.state.view, RunStory(self.state, self.home)
        if view is not None and not view.recorded:
            self._draw(f"pass {view.index}", Content("\n").join(story.unhooked(view)))
            return
        if view is None or node is None or node not in view.graph:
            end = list(story.script_end())
            body = Content("\n").join(end) if end else Content.styled("waiting for the first backward pass…", MUTED)
            self._draw("detail", body)
            return
        data = node_info(view.graph, node)
        title = view.title(node) + (f" · {data.source}" if data.source else "")
        sections = NodeSections(self.state, self.home, self.scrollable_content_region.width, self.compact)
        lines = sections.lines(view, node)
        end = list(story.pass_end(view)) + list(story.script_end())
        if end:
            lines += [Content(""), *end]
        self._draw(title, Content("\n").join(lines))

    def show_module(self, tree: ModuleTree, path: str) -> None:
        """Sum up a module row of the module view."""
        self.node = None
        self._draw(f"module {path}", Content("\n").join(module_summary(tree, path)))

    def on_resize(self) -> None:
        """Source lines are cut to the width: redraw, once the new width is laid out."""
        if self.node is not None:
            self.call_after_refresh(self._reshow)

    def _reshow(self) -> None:
        if self.node is not None:
            self.show(self.node)
