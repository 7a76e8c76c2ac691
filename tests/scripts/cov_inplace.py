"""In-place ops on intermediates: relu_, mul_, add_, and an in-place write into a slice (CopySlices)."""

import sys

import torch

torch.manual_seed(0)
x = torch.randn(4, 3, requires_grad=True)
w = torch.randn(3, 3, requires_grad=True)
h = x @ w
h.mul_(2.0).add_(1.0)
h[0].mul_(3.0)
h[:, 1] += x[:, 0]
h.relu_()
loss = h.pow(2).sum()
loss.backward()
torch.save({"x": x.grad, "w": w.grad}, sys.argv[1])
