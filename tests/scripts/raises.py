"""One backward pass, then an uncaught exception."""

import torch


def fail() -> None:
    raise ValueError("boom after one pass")


x = torch.tensor([1.0], requires_grad=True)
(x * 2).sum().backward()
fail()
