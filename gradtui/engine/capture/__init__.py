"""Capture: walking a backward pass's autograd graph (`grad_fn.next_functions`) into plain data, the labels and parameter names
put on its nodes, what each node saved, and the variables where backward was called.

May import: torch, networkx, gradtui.protocol and gradtui.engine.compat; never the hooks, the session or Textual.
"""
