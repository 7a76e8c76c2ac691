"""A tiny DDP job for tests/distributed: an MLP, 2 passes, gradients saved per rank.

argv: OUT_DIR MODE (plain | diverge | nan). Timeout 5 s on purpose: a pause longer than that
must not lose a rank. `diverge`: pass 1 runs under no_sync with rank 1's loss scaled (the
gradients then differ across ranks). `nan`: rank 1's input holds a NaN on pass 1."""

import os
import sys

import script_end
import torch
from ddp_setup import ddp_job

out, mode = sys.argv[1], sys.argv[2]
rank, model, ddp, opt = ddp_job()
for step in range(2):
    x = torch.randn(16, 4)
    if mode == "nan" and step == 1 and rank == 1:
        x[3, 2] = float("nan")
    opt.zero_grad()
    if mode == "diverge" and step == 1:
        with ddp.no_sync():
            loss = ddp(x).pow(2).mean() * (1.0 + rank)
            loss.backward()
    else:
        loss = ddp(x).pow(2).mean()
        loss.backward()
    torch.save({n: p.grad.clone() for n, p in model.named_parameters()}, os.path.join(out, f"grads{step}-{rank}.pt"))
    opt.step()
print(f"rank {rank} done", flush=True)
# Both ranks out of every collective, then leave (see script_end: gloo's abort at exit).
script_end.end()
