"""The classic forum question: "my model returns the stacked per-step outputs a_s, b_s, c_s;
how do I get their gradients?" A small recurrent model trained for three steps; the loss uses
a_s and b_s, while c_s is built beside them and never used.

argv[1]: where to save the parameters' gradients of every step (and, with argv[2] == "retain",
the gradients of a_s, b_s, c_s that retain_grad() inside the model gives)."""

import sys

import torch
from torch import nn

RETAIN = len(sys.argv) > 2 and sys.argv[2] == "retain"


class Recurrent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(2, 3)
        self.rec = nn.Linear(3, 3, bias=False)
        self.head_a = nn.Linear(3, 1)
        self.head_b = nn.Linear(3, 1)
        self.head_c = nn.Linear(3, 1)

    def forward(self, xs):
        h = torch.zeros(xs.shape[1], 3)
        a_list, b_list, c_list = [], [], []
        for x in xs:
            h = torch.tanh(self.inp(x) + self.rec(h))
            a_list.append(self.head_a(h))
            b_list.append(torch.sigmoid(self.head_b(h)))
            c_list.append(self.head_c(h) * 2)
        a_s, b_s, c_s = torch.stack(a_list), torch.stack(b_list), torch.stack(c_list)
        if RETAIN:
            for t in (a_s, b_s, c_s):
                t.retain_grad()
        return a_s, b_s, c_s


torch.manual_seed(0)
model = Recurrent()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
xs = torch.randn(4, 2, 2)  # 4 steps, batch 2
target = torch.randn(4, 2, 1)
saved = {}
for step in range(3):
    opt.zero_grad()
    a_s, b_s, c_s = model(xs)
    loss = (a_s - target).pow(2).mean() + (b_s * a_s).sum() * 0.1
    loss.backward()
    for name, p in model.named_parameters():
        if p.grad is not None:
            saved[f"{name}.{step}"] = p.grad.clone()
    if RETAIN:
        assert c_s.grad is None
        saved[f"a_s.{step}"], saved[f"b_s.{step}"] = a_s.grad.clone(), b_s.grad.clone()
    opt.step()
    print(f"step {step} loss {loss.item():.4f}")
torch.save(saved, sys.argv[1])
