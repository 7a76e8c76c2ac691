"""Names vulture (`vulture gradtui scripts scripts/vulture_whitelist.py --min-confidence 60`)
takes for unused that are used from outside gradtui's own calls: file-like protocols that
`print`, `io` and scripts call on `sys.stdout`, the methods textual-serve and aiohttp call on
their subclasses, Textual's handlers, a list a test walks, and hook parameters a signature needs.
Not imported by anything; each line names where the name is defined."""

# ruff: noqa
# type: ignore
_ = object()

_.buffer  # gradtui/engine/runner.py: sys.stdout.buffer of the captured stream
_.encoding  # gradtui/engine/runner.py: sys.stdout.encoding
_.writable  # gradtui/engine/runner.py: io's protocol
_.isatty  # gradtui/engine/runner.py: io's protocol
_.writelines  # gradtui/record/tee.py: io's protocol
_.SYMBOLS  # gradtui/engine/compat.py: tests/engine/test_compat.py checks each on this torch
_.on_unmount  # gradtui/serve/tab.py: Textual's Unmount handler
_._open_app_process  # gradtui/serve/web.py: textual-serve's AppService method, overridden
_._stdin  # gradtui/serve/web.py: read by textual-serve's AppService
_.on_startup  # gradtui/serve/web.py: textual-serve's Server hook, overridden
grads_in  # scripts/bench_core.py: a posthook's parameters (torch passes both)
grads_out  # scripts/bench_core.py
