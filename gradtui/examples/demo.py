"""gradtui's demo: a tiny MLP learns y = sin(x) for a few steps.

Run it under the debugger with `gradtui` (no arguments). Try: `s` to step, `b` on a node
then `c`, `x` to scale a gradient, `:why x` to ask why the input has no .grad.
"""

import torch
from torch import nn

torch.manual_seed(0)


class MLP(nn.Module):
    """Two layers with a tanh between them."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(1, 16)
        self.fc2 = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.fc1(x))
        return self.fc2(h)


model = MLP()
lr = 0.1  # plain SGD, written out below: making a torch.optim optimizer imports torch._dynamo (over 1 s of CPU)
x = torch.linspace(-3, 3, 32).unsqueeze(1)
target = torch.sin(x)

for step in range(3):
    prediction = model(x)
    loss = ((prediction - target) ** 2).mean()
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p.add_(p.grad, alpha=-lr)
    print(f"step {step} loss {loss.item():.4f}")
