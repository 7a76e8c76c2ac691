"""z = (x * 3) ** 2 at x = 2, one pass: the engine runs PowBackward0, then MulBackward0."""

import torch

torch.manual_seed(0)
x = torch.tensor([2.0], requires_grad=True)
y = x * 3
z = y ** 2
z.backward()
print(f"x.grad = {x.grad.item()}")
