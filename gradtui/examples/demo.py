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
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.linspace(-3, 3, 32).unsqueeze(1)
target = torch.sin(x)

for step in range(3):
    prediction = model(x)
    loss = ((prediction - target) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}")
