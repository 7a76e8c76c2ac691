"""A backward pass that makes NaN: sqrt at 0 has an infinite derivative, and 0 * inf = nan.

The forward pass is finite (sqrt(0) = 0); the gradient is not. `break nan` finds the node.
"""

import torch

w = torch.tensor([1.0, 0.0, 4.0], requires_grad=True)
scale = torch.tensor([2.0, 0.0, 1.0])
root = torch.sqrt(w)
scaled = root * scale
loss = scaled.sum()
loss.backward()
print(f"w.grad = {w.grad.tolist()}")
