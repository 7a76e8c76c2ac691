"""torch.autograd.backward with several roots (one non-scalar, with its grad_tensor)."""

import sys

import torch

torch.manual_seed(0)
x = torch.randn(3, requires_grad=True)
w = torch.randn(3, requires_grad=True)
h = x * w
first = h.exp().sum()
second = torch.sin(h) * 2
torch.autograd.backward([first, second], [None, torch.tensor([1.0, 0.5, -1.0])])
torch.save({"x": x.grad, "w": w.grad, "first": first.detach()}, sys.argv[1])
