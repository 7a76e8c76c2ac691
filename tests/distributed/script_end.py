"""The end of every tests/distributed script: leave the process group without the gloo abort.

Under load gloo sometimes aborts a rank as its process exits ("terminate called without an
active exception", SIGABRT), with or without gradtui, even after a barrier and
`destroy_process_group()`: torchrun then fails the job although the script's work is done. That
breaks the plain runs the tests use as their oracle. Measured beside a CPU hog, 10 plain
ddp_train.py runs each: barrier + destroy_process_group, 2 of 10 aborted; barrier + os._exit(0),
0 of 10.

A plain run (no gradtui in the process) therefore ends at once after the barrier, its output
flushed: its results (saved gradients, printed lines) are all written by then. Under gradtui the
script returns normally, since gradtui has its own work after the script (its last events, the
exit status it reports), which an os._exit here would skip.
"""

import os
import sys

import torch.distributed as dist


def end(barrier: bool = True) -> None:
    """Barrier (unless a rank is known not to join one), then leave: at once in a plain run."""
    if barrier:
        dist.barrier()
    if "gradtui" in sys.modules:
        dist.destroy_process_group()
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
