"""The script's own tensor hook doubles a hidden gradient; saves leaf grads to argv[1]."""

import sys

import torch

torch.manual_seed(0)
x = torch.randn(5, requires_grad=True)
w = torch.randn(5, 5, requires_grad=True)
h = torch.sin(w @ x)
h.register_hook(lambda g: 2 * g)
loss = (h ** 2).sum()
loss.backward()
torch.save({"x": x.grad, "w": w.grad}, sys.argv[1])
