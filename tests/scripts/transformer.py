"""A seeded nn.TransformerEncoderLayer (no dropout, training mode); saves leaf grads to argv[1]."""

import sys

import torch
from torch import nn

torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0)
x = torch.randn(5, 2, 8, requires_grad=True)
loss = layer(x).pow(2).sum()
loss.backward()
if len(sys.argv) > 1:
    torch.save({"x": x.grad, **{n: p.grad for n, p in layer.named_parameters()}}, sys.argv[1])
