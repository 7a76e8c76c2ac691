"""A DDP job whose `2.bias` is left out of the all-reduce and doubled on rank 1, for tests/distributed.

argv: OUT_DIR STEPS. Timeout 5 s on purpose. Pass 0 has the same input on both ranks and no
doubling, so its gradients agree; from pass 1 on each rank has its own input and rank 1
doubles the bias's gradient, so `2.bias` differs across ranks after the all-reduce (a desync
that `break diverge` names) on every pass, while the other parameters are all-reduced.
Prints every rank's loss and bias gradient per step: the job must print the same under gradtui."""

import datetime
import sys

import script_end
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

steps = int(sys.argv[2])
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
DDP._set_params_and_buffers_to_ignore_for_model(model, ["2.bias"])
ddp = DDP(model)
opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
step = 0
if rank == 1:
    model[2].bias.register_hook(lambda g: g * 2 if step > 0 else g)
for step in range(steps):
    torch.manual_seed(100 + step + (rank if step else 0))
    x = torch.randn(16, 4)
    opt.zero_grad()
    loss = ddp(x).pow(2).mean()
    loss.backward()
    print(
        f"rank {rank} step {step} loss {loss.item():.8f} bias {model[2].bias.grad.item():.8f}\n", end="", flush=True
    )  # one write: the ranks share one output file, and an unbuffered print writes the newline apart
    opt.step()
# Both ranks out of every collective, then leave (see script_end: gloo's abort at exit).
script_end.end()
