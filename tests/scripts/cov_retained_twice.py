"""retain_graph=True, then a second backward over the retained graph (gradients accumulate)."""

import sys

import torch

torch.manual_seed(0)
x = torch.randn(4, requires_grad=True)
w = torch.randn(4, requires_grad=True)
loss = (torch.sigmoid(x * w) ** 2).sum()
loss.backward(retain_graph=True)
first = {"x.first": x.grad.clone(), "w.first": w.grad.clone()}
loss.backward()
torch.save({**first, "x": x.grad, "w": w.grad}, sys.argv[1])
