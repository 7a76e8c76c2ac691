"""A forward loop that runs for a very long time and never calls backward."""

import torch

x = torch.ones(3, requires_grad=True)
print("looping", flush=True)
for i in range(10**9):
    y = (x * 2).sum()
