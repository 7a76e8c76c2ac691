"""torch.autograd.grad instead of backward: saves the returned gradients to argv[1]."""

import sys

import torch

torch.manual_seed(0)
x = torch.randn(4, 3, requires_grad=True)
w = torch.randn(3, 2, requires_grad=True)
loss = torch.tanh(x @ w).sum()
gx, gw = torch.autograd.grad(loss, [x, w])
assert x.grad is None and w.grad is None
torch.save({"x": gx, "w": gw}, sys.argv[1])
