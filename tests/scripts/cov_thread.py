"""backward called from a thread the script starts (joined with a timeout)."""

import sys
import threading

import torch

torch.manual_seed(0)
x = torch.randn(3, requires_grad=True)
w = torch.randn(3, requires_grad=True)


def train():
    loss = (x * w).tanh().pow(2).sum()
    loss.backward()


worker = threading.Thread(target=train, name="user-worker")
worker.start()
worker.join(30)
assert not worker.is_alive(), "the backward in the worker thread never finished"
torch.save({"x": x.grad, "w": w.grad}, sys.argv[1])
