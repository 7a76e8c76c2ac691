"""A custom autograd.Function with two inputs and two outputs, one of them non-differentiable."""

import sys

import torch


class ScaledCube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, s):
        ctx.save_for_backward(x, s)
        index = torch.argmax(x)
        ctx.mark_non_differentiable(index)
        return x ** 3 * s, index

    @staticmethod
    def backward(ctx, grad, _grad_index):
        x, s = ctx.saved_tensors
        return 3 * x ** 2 * s * grad, (x ** 3 * grad).sum().reshape(s.shape)


torch.manual_seed(0)
x = torch.randn(5, requires_grad=True)
s = torch.randn(1, requires_grad=True)
cubed, index = ScaledCube.apply(x * 2, s)
loss = (cubed * torch.arange(5.0)).sum() + cubed[index]
loss.backward()
torch.save({"x": x.grad, "s": s.grad}, sys.argv[1])
