"""Never calls backward."""

import torch

print("forward only", torch.ones(2).sum().item())
