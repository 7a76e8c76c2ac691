"""A graph with an unused branch: split gives two tensors, the loss uses only the first, so
the split's node receives None for the second."""

import sys

import torch

torch.manual_seed(0)
x = torch.randn(4, requires_grad=True)
w = torch.randn(4, requires_grad=True)
h = x * w
used, unused = h.split(2)
loss = used.exp().sum()
loss.backward()
torch.save({"x": x.grad, "w": w.grad}, sys.argv[1])
