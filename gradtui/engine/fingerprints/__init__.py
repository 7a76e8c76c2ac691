"""Fingerprints: sketches of a recorded pass's values that let two runs be compared from their recordings alone
(`gradtui diff`, `--against`): the sign sketch, which ops only move elements, and the per-graph plan of what
each node's values need.

May import: torch, gradtui.protocol, gradtui.engine.compat and capture; never the hooks, the session or Textual.
"""
