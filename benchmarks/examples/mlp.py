"""A small MLP training loop on a fixed, seeded regression problem."""

import torch
from torch import nn

torch.manual_seed(0)

model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
lr = 0.05  # plain SGD, written out below: making a torch.optim optimizer imports torch._dynamo (over 1 s of CPU)
inputs = torch.randn(64, 4)
targets = inputs.sum(dim=1, keepdim=True)

for epoch in range(3):
    prediction = model(inputs)
    loss = nn.functional.mse_loss(prediction, targets)
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.add_(p.grad, alpha=-lr)
    print(f"epoch {epoch} loss {loss.item():.4f}")
