"""Tensor.backward(gradient=...) on a non-scalar output; saves leaf grads to argv[1]."""

import sys

import torch

torch.manual_seed(0)
x = torch.randn(3, requires_grad=True)
w = torch.randn(3, 3, requires_grad=True)
y = torch.tanh(w @ x)
y.backward(gradient=torch.tensor([1.0, -2.0, 0.5]))
torch.save({"x": x.grad, "w": w.grad}, sys.argv[1])
