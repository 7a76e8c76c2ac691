"""The script's own tensor hook raises during backward."""

import torch


def bad_hook(grad):
    raise ValueError("bad hook")


x = torch.tensor([1.0], requires_grad=True)
y = x * 2
y.register_hook(bad_hook)
y.sum().backward()
