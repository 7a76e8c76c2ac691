"""Prints `ready`, runs one backward pass, then sleeps: a run for a signal to end (tests/cli/test_exits.py)."""
import time

import torch

x = torch.ones(3, requires_grad=True)
print("ready", flush=True)
(x * 2).sum().backward()
print("backward done", flush=True)
time.sleep(120)
