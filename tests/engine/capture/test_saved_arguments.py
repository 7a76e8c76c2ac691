"""A node's saved non-tensor arguments read as the script gave them (the node detail's `saved`
lines, a fingerprint's argument text): torch's getters read an int64 saved argument back as
unsigned, so an embedding's default padding_idx (-1) would read 18446744073709551615."""

from __future__ import annotations

import torch

from gradtui.engine.capture.saved import saved_summary
from gradtui.engine.compat import saved_argument


def test_an_embeddings_default_padding_idx_reads_minus_one():
    node = torch.nn.Embedding(10, 3)(torch.tensor([1, 2])).grad_fn
    raw = node._saved_padding_idx
    assert raw in (-1, (1 << 64) - 1)  # torch's own reading (unsigned in the torch this was written on)
    assert "padding_idx = -1" in saved_summary(node)
    assert saved_argument(raw) == -1


def test_other_arguments_are_left_as_they_are():
    assert saved_argument(True) is True and saved_argument(3) == 3 and saved_argument("tanh") == "tanh"
    assert saved_argument((1, (1 << 64) - 2)) == (1, -2) and saved_argument([(1 << 63) - 1]) == [(1 << 63) - 1]
