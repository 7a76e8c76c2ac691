"""The smallest chain: z = (x * 3) ** 2 at x = 2, so dz/dy = 12 and dz/dx = 36."""

import torch

x = torch.tensor([2.0], requires_grad=True)
y = x * 3
z = y ** 2
z.backward()
print(f"x.grad = {x.grad.item()}")
