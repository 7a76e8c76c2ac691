"""A custom autograd.Function (a cube with its own backward); saves leaf grads to argv[1]."""

import sys

import torch


class Cube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x ** 3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 3 * x ** 2 * grad


torch.manual_seed(0)
x = torch.randn(6, requires_grad=True)
w = torch.randn(6, requires_grad=True)
cubed = Cube.apply(x * w)
loss = (cubed * torch.arange(6.0)).sum()
loss.backward()
torch.save({"x": x.grad, "w": w.grad}, sys.argv[1])
