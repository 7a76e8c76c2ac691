"""The models the benchmarks run (an encoder of any depth and width, a training loop as a
script), in a module of their own: benchmarks/bench.py, bench_core.py and bench_record.py use them
and none imports another."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn

D_MODEL, HEADS, FFN = 256, 8, 1024


def transformer(layers: int, width: int = D_MODEL) -> nn.Module:
    """nn.TransformerEncoder of `layers` layers, d_model `width`, seeded, no dropout."""
    import torch  # here: a bench that only writes ENCODER_LOOP to a file loads no torch
    from torch import nn

    torch.manual_seed(0)
    heads, ffn = (HEADS, FFN) if width == D_MODEL else (4, 2 * width)
    layer = nn.TransformerEncoderLayer(width, heads, ffn, batch_first=True, dropout=0.0)
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)


def model_sizes(layers: int, batch: tuple[int, int], width: int = D_MODEL) -> str:
    """The encoder and batch as a table row names them."""
    heads, ffn = (HEADS, FFN) if width == D_MODEL else (4, 2 * width)
    return f"{layers}-layer encoder d={width} h={heads} ffn={ffn}, batch {batch[0]}x{batch[1]}"


ENCODER_LOOP = """\
import sys, torch
from torch import nn
torch.manual_seed(0)
torch.set_num_threads(1)
steps, layers = int(sys.argv[1]), int(sys.argv[2])
layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
model = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(8, 32, 64)
for step in range(steps):
    optimizer.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
"""
