"""AddBackward0 sends one gradient tensor to both its inputs: an in-place change at one of
them reaches the other. x.grad = 3 + 2 = 5 per element; saves it to argv[1]; `spin` (for tests
that need an expression that runs until interrupted) tells stash["spinning"] when it starts."""

import sys
import time

import torch

x = torch.ones(2, requires_grad=True)
b = x * 3
a = x * 2  # made last: the engine runs a's node first, then b's, with the same gradient tensor
loss = (b + a).sum()


def spin(seconds: float = 30.0) -> str:
    """Busy Python code (an async exception lands at its next bytecode) for at most `seconds`."""
    import stash

    stash.items["spinning"].set()
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
    return "spun to the end"


loss.backward()
print("x.grad", x.grad.tolist())
if len(sys.argv) > 1:
    torch.save({"x": x.grad}, sys.argv[1])
