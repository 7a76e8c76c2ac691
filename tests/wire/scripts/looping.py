"""A training loop that goes on for a while: an agent to attach to, detach from, and attach to again."""

import time

import torch

w = torch.ones(3, requires_grad=True)
for step in range(400):
    loss = (w * 2).sum()
    loss.backward()
    w.grad = None
    time.sleep(0.02)
print("loop done")
