"""A plain script that calls gradtui.listen() before its training loop."""

import torch

import gradtui

gradtui.listen()
w = torch.tensor([2.0], requires_grad=True)
for step in range(3):
    loss = (w * 3) ** 2
    loss.backward()
    print(f"step {step} grad {w.grad.item()}", flush=True)
    w.grad = None
