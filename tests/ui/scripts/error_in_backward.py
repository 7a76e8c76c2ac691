"""A custom autograd.Function whose backward raises: gradtui shows the error beside its node."""

import torch


class Explode(torch.autograd.Function):
    """Doubles its input; its backward refuses to run."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        raise ValueError("this backward explodes on purpose")


x = torch.tensor([1.0, 2.0], requires_grad=True)
y = Explode.apply(x)
loss = (y ** 2).sum()
print("calling backward")
loss.backward()
