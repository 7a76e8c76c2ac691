"""backward(create_graph=True): .grad itself has a graph; a second backward goes through it."""

import sys

import torch

torch.manual_seed(0)
x = torch.randn(3, requires_grad=True)
w = torch.randn(3, requires_grad=True)
loss = (x ** 3 * w).sum()
loss.backward(create_graph=True)
assert x.grad.requires_grad
first = {"x.first": x.grad.detach().clone(), "w.first": w.grad.detach().clone()}
gx = x.grad
x.grad = None
w.grad = None
penalty = (gx ** 2).sum()
penalty.backward()
torch.save({**first, "x": x.grad, "w": w.grad}, sys.argv[1])
