"""Statistics: what a gradient looks like without keeping it: `Stats` summaries read at once or in bulk, the
`nan` / `norm>X` watch over them, the leaves' gradients and the gradient flow, and the per-pass record they fill.

May import: torch, gradtui.protocol, gradtui.engine.compat, capture, process.quitting (what user code
raised) and the stepper's `Owner`; never the hooks, the session or Textual.
"""
