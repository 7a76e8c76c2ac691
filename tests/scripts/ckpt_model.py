"""A small model whose middle block runs under a reentrant checkpoint (use_reentrant=True),
trained for argv[2] steps (default 2); saves every parameter's gradient of the last step to
argv[1]."""

import sys

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin1 = nn.Linear(6, 6)
        self.lin2 = nn.Linear(6, 6)

    def forward(self, h):
        return self.lin2(torch.tanh(self.lin1(h)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 6)
        self.block = Block()
        self.out = nn.Linear(6, 1)

    def forward(self, x):
        h = torch.relu(self.inp(x))
        h = checkpoint(self.block, h, use_reentrant=True)
        return self.out(h)


torch.manual_seed(0)
net = Net()
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x, y = torch.randn(8, 4), torch.randn(8, 1)
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 2
for step in range(steps):
    opt.zero_grad()
    loss = nn.functional.mse_loss(net(x), y)
    loss.backward()
    if step < steps - 1:
        opt.step()
torch.save({name: p.grad.clone() for name, p in net.named_parameters()}, sys.argv[1])
