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


def gpt(layers: int = 4, width: int = D_MODEL, vocab: int = 1024, context: int = 128) -> nn.Module:
    """A GPT-2-style decoder (token and position embeddings, pre-norm blocks of causal
    self-attention and a GELU MLP, a head tied to the embedding), seeded, no dropout: the model
    of the training-loop rows, `layers` blocks of width `width`. Called with token ids
    (batch, time); returns logits (batch, time, vocab)."""
    import torch
    from torch import nn
    from torch.nn import functional

    class Block(nn.Module):
        """One pre-norm block: x + attention(norm(x)), then x + mlp(norm(x))."""

        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
            self.heads = max(1, width // 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, c = x.shape
            q, k, v = self.qkv(self.norm1(x)).split(c, dim=-1)
            q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
            y = functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.mlp(self.norm2(x))

    class GPT(nn.Module):
        """Embeddings, `layers` blocks, a final norm, the tied head."""

        def __init__(self) -> None:
            super().__init__()
            self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(context, width)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm = nn.LayerNorm(width)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1], device=ids.device))
            for block in self.blocks:
                x = block(x)
            return self.norm(x) @ self.tokens.weight.t()

    torch.manual_seed(0)
    return GPT()
