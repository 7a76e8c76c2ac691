"""z = (x * 3) ** 2 at x = 2: dz/dy = 12 reaches y's node, dz/dx = 36 reaches x. Saves x.grad to argv[1]."""

import sys

import torch

x = torch.tensor([2.0], requires_grad=True)
y = x * 3
z = y ** 2
z.backward()
print(f"x.grad = {x.grad.item()}")
if len(sys.argv) > 1:
    torch.save({"x": x.grad}, sys.argv[1])
