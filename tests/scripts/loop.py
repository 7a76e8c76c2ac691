"""The chain of chain.py, backward N times (argv[1], default 3); prints each pass's x.grad."""

import sys

import torch

passes = int(sys.argv[1]) if len(sys.argv) > 1 else 3
x = torch.tensor([2.0], requires_grad=True)
for i in range(passes):
    x.grad = None
    y = x * 3
    z = y ** 2
    z.backward()
    print(f"pass {i} x.grad = {x.grad.item()}")
