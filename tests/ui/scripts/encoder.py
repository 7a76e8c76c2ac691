"""A 48-layer TransformerEncoder pass (~3,000 nodes): the module view's size test."""

import torch
from torch import nn

torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
encoder = nn.TransformerEncoder(layer, num_layers=48, enable_nested_tensor=False)
src = torch.randn(2, 4, 16)
loss = encoder(src).pow(2).mean()
loss.backward()
print(f"loss {loss.item():.4f}")
