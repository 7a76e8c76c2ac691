"""Higher order: grad(create_graph=True), then backward through that gradient (whose graph
holds the first pass's backward nodes): a gradient penalty."""

import sys

import torch

torch.manual_seed(0)
x = torch.randn(2, 3, requires_grad=True)
w = torch.randn(3, 3, requires_grad=True)
y = torch.tanh(x @ w).sum()
(gx,) = torch.autograd.grad(y, x, create_graph=True)
penalty = gx.pow(2).sum()
penalty.backward()
torch.save({"gx": gx.detach(), "x": x.grad, "w": w.grad}, sys.argv[1])
