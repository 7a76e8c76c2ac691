"""Names vulture (`vulture gradtui benchmarks benchmarks/vulture_whitelist.py --min-confidence 60`)
takes for unused that are used from outside gradtui's own calls: file-like protocols that
`print`, `io` and scripts call on `sys.stdout`, the methods textual-serve and aiohttp call on
their subclasses, Textual's handlers, a list a test walks, and hook parameters a signature needs;
then the UI's names that Textual calls or reads by name (actions, message handlers, watchers,
hooks, class settings, reactives it draws by), one group per kind. Not imported by anything;
each line names where the name is defined."""

# ruff: noqa
# type: ignore
_ = object()

_.buffer  # gradtui/engine/process/runner.py: sys.stdout.buffer of the captured stream
_.encoding  # gradtui/engine/process/runner.py: sys.stdout.encoding
_.writable  # gradtui/engine/process/runner.py: io's protocol
_.isatty  # gradtui/engine/process/runner.py: io's protocol
_.writelines  # gradtui/record/tee.py: io's protocol
_.SYMBOLS  # gradtui/engine/compat.py: tests/engine/test_compat.py checks each on this torch
_.on_unmount  # gradtui/serve/tab.py: Textual's Unmount handler
_._open_app_process  # gradtui/serve/web.py: textual-serve's AppService method, overridden
_._stdin  # gradtui/serve/web.py: read by textual-serve's AppService
_.on_startup  # gradtui/serve/web.py: textual-serve's Server hook, overridden
grads_in  # benchmarks/bench_core.py: a posthook's parameters (torch passes both)
grads_out  # benchmarks/bench_core.py

# gradtui/ui (paths below are under it): Textual calls `action_<name>` for a key binding (ui/keys.py, BINDINGS) or an `action_` link
_.action_break_here  # screens/source.py
_.action_breakpoints  # screens/debugger.py
_.action_by_difference  # screens/debugger.py
_.action_cancel  # screens/prompt.py
_.action_choose_plot  # screens/passes.py
_.action_close  # screens/breakpoints.py, screens/flow.py, screens/help.py and 4 more
_.action_collapse  # widgets/node_list.py
_.action_command  # screens/debugger.py
_.action_cont  # screens/debugger.py
_.action_detach  # screens/debugger.py
_.action_down  # screens/debugger.py
_.action_edit  # screens/debugger.py
_.action_expand  # widgets/node_list.py
_.action_find  # screens/debugger.py
_.action_find_next  # screens/debugger.py
_.action_finish  # screens/debugger.py
_.action_flow  # screens/debugger.py
_.action_focus_next  # app.py
_.action_focus_previous  # app.py
_.action_fold  # widgets/node_list.py
_.action_goto_current  # screens/debugger.py
_.action_graph_narrower  # screens/debugger.py
_.action_graph_wider  # screens/debugger.py
_.action_help  # screens/debugger.py
_.action_history  # widgets/command_bar.py
_.action_jump  # widgets/node_list.py
_.action_leave  # widgets/command_bar.py
_.action_log_scale  # screens/passes.py
_.action_modules  # screens/debugger.py
_.action_move  # screens/plotchoice.py, widgets/node_list.py
_.action_narrower  # screens/debugger.py
_.action_newer_pass  # screens/debugger.py
_.action_older_pass  # screens/debugger.py
_.action_page  # widgets/node_list.py
_.action_passes  # screens/debugger.py
_.action_print  # screens/debugger.py
_.action_scale  # screens/debugger.py
_.action_select_line  # screens/source.py
_.action_show  # screens/passes.py
_.action_smoothing  # screens/passes.py
_.action_source  # screens/debugger.py
_.action_step  # screens/debugger.py
_.action_toggle_break  # screens/debugger.py
_.action_up  # screens/debugger.py
_.action_variables  # screens/debugger.py
_.action_wider  # screens/debugger.py
_.action_zero  # screens/debugger.py
_.action_zoom  # screens/debugger.py
_.action_zoom_output  # screens/debugger.py

# gradtui/ui (paths below are under it): Textual calls `on_<message>` (`on_<widget>_<message>` for a nested Message) when that message or event reaches the widget
_.on_blur  # widgets/node_list.py
_.on_body_pane_node_clicked  # screens/debugger.py
_.on_click  # widgets/body.py, widgets/node_list.py
_.on_command_bar_submitted  # screens/debugger.py
_.on_data_table_row_highlighted  # screens/passes.py
_.on_data_table_row_selected  # screens/breakpoints.py, screens/passes.py, widgets/variables.py
_.on_focus  # widgets/node_list.py
_.on_history_input_leave  # screens/debugger.py
_.on_input_changed  # screens/plotchoice.py
_.on_input_submitted  # screens/plotchoice.py, screens/prompt.py, widgets/command_bar.py
_.on_left_column_dragged  # screens/debugger.py
_.on_mouse_down  # widgets/column.py
_.on_mouse_move  # widgets/column.py
_.on_mouse_up  # widgets/column.py
_.on_node_list_module_selected  # screens/debugger.py
_.on_node_list_pass_shown  # screens/debugger.py
_.on_node_list_refreshed  # screens/debugger.py
_.on_node_list_selected  # screens/debugger.py
_.on_option_list_option_highlighted  # screens/source.py
_.on_option_list_option_selected  # screens/plotchoice.py, screens/source.py
_.on_resize  # app.py, screens/help.py, screens/passes.py and 4 more
_.on_source_screen_break_requested  # app.py
_.on_target_link_batch  # app.py
_.on_target_link_failed  # app.py
_.on_target_link_started  # app.py

# gradtui/ui (paths below are under it): Textual calls `watch_<reactive>` when that reactive changes
_.watch_by_difference  # widgets/node_list.py
_.watch_changes  # app.py
_.watch_chosen  # screens/passes.py
_.watch_cursor  # widgets/node_list.py
_.watch_cursor_pass  # screens/passes.py
_.watch_log_scale  # screens/passes.py
_.watch_smoothing  # screens/passes.py

# gradtui/ui (paths below are under it): hooks Textual calls by name: a widget's children, a Line API row, whether a binding's action applies now, the app's first screen; the Command Palette provider's list before typing
_.check_action  # app.py, screens/debugger.py
_.compose  # app.py, screens/breakpoints.py, screens/flow.py and 11 more
_.discover  # search.py
_.get_default_screen  # app.py
_.render_line  # widgets/node_list.py, widgets/output_log.py

# gradtui/ui (paths below are under it): class settings Textual reads: the stylesheet, the title, a widget's default styles and component classes, what may be maximized
_.ALLOW_IN_MAXIMIZED_VIEW  # app.py
_.ALLOW_MAXIMIZE  # widgets/body.py
_.COMPONENT_CLASSES  # widgets/node_list.py
_.CSS_PATH  # app.py
_.DEFAULT_CSS  # widgets/header.py, widgets/output_log.py, widgets/ranks.py
_.TITLE  # app.py

# gradtui/ui (paths below are under it): reactives Textual draws by when set: a pane's border titles, a ScrollView's scrollable size, the footer's palette key, an Input's cursor; and a reactive whose watcher does the work
_.border_subtitle  # screens/breakpoints.py, screens/flow.py, screens/help.py and 5 more
_.border_title  # app.py, screens/breakpoints.py, screens/flow.py and 8 more
_.cursor_pass  # screens/passes.py
_.cursor_position  # widgets/command_bar.py
_.show_command_palette  # app.py
_.virtual_size  # widgets/node_list.py, widgets/output_log.py

# gradtui/ui (paths below are under it): what a widget shows, as plain values, for the Pilot tests
# that assert it (a log's lines and renders, the command bar's answer): read from tests only
_.answer_text  # widgets/command_bar.py
_.line_count  # widgets/output_log.py
_.plain_lines  # widgets/output_log.py
_.renders  # widgets/output_log.py
_.styled_line  # widgets/output_log.py

# engine: counts the tests assert (how many values a pass sketched, how many graph plans are kept)
_.sketched  # engine/fingerprint.py
_.plans_kept  # engine/printplan.py
_.reused  # engine/plancache.py

# model/lazygraph.py: the state a LazyGraph reads through its __dict__ (a build can swap its class
# under a reader), the class swap itself, and the check the tests make of it
_._lazy  # model/lazygraph.py
_.__class__  # model/lazygraph.py
is_built  # model/lazygraph.py, read by tests/engine and tests/model
