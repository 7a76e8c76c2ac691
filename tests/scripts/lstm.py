"""A seeded nn.LSTM over a short sequence; saves leaf grads to argv[1]."""

import sys

import torch
from torch import nn

torch.manual_seed(0)
lstm = nn.LSTM(3, 5, num_layers=2)
head = nn.Linear(5, 1)
x = torch.randn(4, 2, 3, requires_grad=True)
out, (h, c) = lstm(x)
loss = head(out).pow(2).mean() + c.sum()
loss.backward()
grads = {"x": x.grad, **{n: p.grad for n, p in lstm.named_parameters()}}
grads.update({f"head.{n}": p.grad for n, p in head.named_parameters()})
torch.save(grads, sys.argv[1])
