"""Hooks: which hooks a pass gets and the hooks themselves: the every-node prehooks/posthooks of a stepped pass,
the hook plan of a pass in `continue` (posthooks only where values can change), its cache across steps, the
nodes it derives instead of hooking, and the compiled posthooks (`native/`, C++ built against the running torch).

May import: torch, gradtui.protocol, gradtui.engine's top level, capture, stats, fingerprints and process
(the quit flag); never the session module itself (hooks reach it through `Owner`) or Textual.
"""
