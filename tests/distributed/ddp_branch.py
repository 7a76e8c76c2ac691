"""A DDP job whose ranks' graphs differ on one pass, for tests/distributed.

argv: OUT_DIR [desync]. Timeout 5 s on purpose. On pass 3 rank 1 adds nodes of its own (a rank-specific
branch, as data-dependent code or expert routing makes): `out * sqrt(zeros)`, whose gradient
is not finite, so `break nan` stops rank 1 there while rank 0 has none of those nodes.
Prints every rank's loss per step: the job must print the same under gradtui as without.
`desync`: after the last step rank 0 enters a barrier that rank 1 never joins (it sleeps): the
job fails at rank 0's timeout, with gradtui as without it."""

import sys
import time

import script_end
import torch
import torch.distributed as dist
from ddp_setup import ddp_job

rank, model, ddp, opt = ddp_job()
for step in range(5):
    x = torch.randn(16, 4)
    opt.zero_grad()
    out = ddp(x)
    if rank == 1 and step == 3:
        out = out * torch.sqrt(torch.zeros((), requires_grad=True))
    loss = out.pow(2).mean()
    loss.backward()
    opt.step()
    print(f"rank {rank} step {step} loss {loss.item():.8f}\n", end="", flush=True)  # one write: ranks share the file
if sys.argv[2:] == ["desync"]:
    if rank == 0:
        dist.barrier()
    else:
        time.sleep(90)
    print(f"rank {rank} after the desync", flush=True)
    dist.destroy_process_group()
else:
    script_end.end()  # both ranks out of every collective, then leave (see script_end)
