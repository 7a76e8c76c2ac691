"""Provenance: during the forward, which user line and which nn.Module made each autograd node (a wrapper of
`nn.Module.__call__` and a TorchFunctionMode), and torch's warnings shown at the user's line.

May import: torch, gradtui.protocol, gradtui.engine.compat and gradtui.engine.capture (the labels it writes);
never the hooks, the session or Textual.
"""
