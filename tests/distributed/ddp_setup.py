"""What every DDP script of tests/distributed starts with: a gloo group with a 5 s collective
timeout (on purpose: a pause longer than that must not lose a rank), the same seeded MLP on
every rank behind DDP, SGD, then a per-rank seed for the data."""

import datetime

import torch
import torch.distributed as dist


def ddp_job() -> tuple[int, torch.nn.Module, torch.nn.Module, torch.optim.Optimizer]:
    """(rank, model, ddp, opt) of a 2-rank job; the data seed is 1 + rank."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=5))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    torch.manual_seed(1 + rank)
    return rank, model, ddp, opt
