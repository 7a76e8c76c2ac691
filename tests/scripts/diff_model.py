"""A tiny seeded model for `gradtui diff` (issue 23): its argument picks the variant.

  (unset)   the reference
  tanh      the second layer's gelu uses approximate="tanh" (one forward op changed)
  backward  the custom Scale function's backward is changed (its forward is the same)
  bf16      the forward under torch.autocast("cpu", dtype=torch.bfloat16)
"""

import sys

import torch

VARIANT = sys.argv[1] if len(sys.argv) > 1 else ""


class Scale(torch.autograd.Function):
    """y = 2x; its backward is 2g (or 3g in the `backward` variant)."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * (3 if VARIANT == "backward" else 2)


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 32)
        self.out = torch.nn.Linear(32, 4)

    def forward(self, x):
        h = torch.nn.functional.gelu(self.fc1(x))
        h = Scale.apply(h)
        approximate = "tanh" if VARIANT == "tanh" else "none"
        h = torch.nn.functional.gelu(self.fc2(h), approximate=approximate)
        return self.out(h)


torch.manual_seed(0)
net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x, y = torch.randn(8, 16), torch.randn(8, 4)
for step in range(3):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=VARIANT == "bf16"):
        out = net(x)
    loss = torch.nn.functional.mse_loss(out.float(), y)
    loss.backward()
    opt.step()
    print(f"step {step} loss {loss.item():.6f}")
