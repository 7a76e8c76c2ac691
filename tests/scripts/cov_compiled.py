"""A torch.compile'd function (backend from argv[2]): its backward is one opaque node."""

import sys

import torch

torch.manual_seed(0)
w = torch.randn(3, 3, requires_grad=True)
x = torch.randn(2, 3, requires_grad=True)


def f(a, b):
    return torch.tanh(a @ b).pow(2)


compiled = torch.compile(f, backend=sys.argv[2])
loss = compiled(x, w).sum() * 3
loss.backward()
torch.save({"x": x.grad, "w": w.grad}, sys.argv[1])
