"""Exits with status 3 after one backward."""

import sys

import torch

x = torch.tensor([1.0], requires_grad=True)
(x * 2).sum().backward()
sys.exit(3)
