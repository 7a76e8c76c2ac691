"""A notebook cell without Jupyter: its text only in `linecache`, as IPython keeps it (the cell's
file name is not on disk), and code compiled under that name that runs a backward."""

import linecache
import os
import tempfile

CELL = os.path.join(tempfile.gettempdir(), f"ipykernel_{os.getpid()}", "3049230926.py")
SOURCE = """import torch
weight = torch.ones(3, requires_grad=True)
hidden = torch.tanh(weight * 2.0)  # the cell's own line
loss = (hidden ** 2).sum()
loss.backward()
"""
lines = SOURCE.splitlines(keepends=True)
linecache.cache[CELL] = (len(SOURCE), None, lines, CELL)
exec(compile(SOURCE, CELL, "exec"), {"__name__": "__main__"})
