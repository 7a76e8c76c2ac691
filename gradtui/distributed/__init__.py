"""Every rank of a torchrun job under gradtui: registration, the job hub, follow mode, checks.

- `job`: torch.distributed as gradtui sees it (rank, world, the job's store, group timeouts).
- `rank`: each rank's side: the gate before every node (follow mode), parking, diverge.
- `hub`: rank 0's side: the job's one address, relaying the shown rank, routing commands.
- `tap`: what the agent plugs in: one session listener and one command filter per rank.
- `events`: the events only a job has (the rank strip's data).
"""
