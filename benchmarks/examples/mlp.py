"""A small MLP training loop on a fixed, seeded regression problem."""

import torch
from torch import nn

torch.manual_seed(0)

model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
inputs = torch.randn(64, 4)
targets = inputs.sum(dim=1, keepdim=True)

for epoch in range(3):
    prediction = model(inputs)
    loss = nn.functional.mse_loss(prediction, targets)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"epoch {epoch} loss {loss.item():.4f}")
