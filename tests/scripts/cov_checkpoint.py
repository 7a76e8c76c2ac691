"""torch.utils.checkpoint, reentrant (argv[2] == "reentrant": a backward inside the backward)
or not; the checkpointed block's weight is also used outside it."""

import sys

import torch
from torch.utils.checkpoint import checkpoint

torch.manual_seed(0)
w = torch.randn(4, 4, requires_grad=True)
x = torch.randn(3, 4, requires_grad=True)


def block(t):
    return torch.tanh(t @ w) * 2


hidden = checkpoint(block, x, use_reentrant=sys.argv[2] == "reentrant")
loss = hidden.pow(2).sum() + (w * w).sum() * 0.1
loss.backward()
torch.save({"x": x.grad, "w": w.grad}, sys.argv[1])
