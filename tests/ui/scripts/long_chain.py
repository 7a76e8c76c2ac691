"""A 10,002-node pass: y = x * 1.0001 ten thousand times (the step-speed benchmark)."""

import torch

x = torch.tensor([1.0], requires_grad=True)
y = x
for _ in range(10_000):
    y = y * 1.0001
loss = y.sum()
loss.backward()
print(f"x.grad = {x.grad.item():.4f}")
