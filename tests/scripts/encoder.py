"""A seeded 2-layer nn.TransformerEncoder: its modules live inside torch, its call in this file."""

import torch
from torch import nn

torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
x = torch.randn(2, 3, 8)
out = encoder(x)
loss = out.pow(2).mean()
loss.backward()
