"""A tiny FSDP2 (`fully_shard`) job for tests/distributed: two passes, each rank's local gradient shards saved.

argv: OUT_DIR. Timeout 5 s on purpose, as in ddp_train.py."""

import datetime
import os
import sys

import script_end
import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

out = sys.argv[1]
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
for layer in (model[0], model[2]):
    fully_shard(layer)
fully_shard(model)
param0 = next(model.parameters())  # a DTensor: this rank's shard of model[0].weight
torch.manual_seed(1 + rank)
for step in range(2):
    model.zero_grad()
    loss = model(torch.randn(6, 4)).pow(2).mean()
    loss.backward()
    torch.save(
        {n: p.grad.to_local().clone() for n, p in model.named_parameters()}, os.path.join(out, f"grads{step}-{rank}.pt")
    )
print(f"rank {rank} done", flush=True)
# Both ranks out of every collective, then leave (see script_end: gloo's abort at exit).
script_end.end()
