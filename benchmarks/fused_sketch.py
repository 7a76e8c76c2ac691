"""A prototype, outside the package: the sign sketch as one fused read of the value.

The compiled posthooks' sketch (gradtui/engine/hooks/native/sketch.h) makes the Python sketch's
torch calls from C++ so its bits are the Python code's: a signed product into a scratch buffer,
a product with ones over the grid's row blocks, a pad, a column sum, the fold (a product), the
norm. On the small values of a d=64 model each of those six kernels costs a few microseconds of
set-up, so the sketch costs 4-8x a bare norm. This kernel reads the value once: each row times
its signs is added into the grid row it falls in (row mod grid rows) while the squares are
summed, in 8-float AVX2 lanes; then the small (grid rows, columns) rest is summed into its cells
(column mod grid columns) and the cells into the K entries. It is the same linear map as
sketch 2 (the same signs, cells and fold: the same estimate of a distance), but the float sums
run in another order, so its bits are not sketch 2's: a sketch version of its own, with a
Python fallback that cannot give the same bits, would be needed to ship it.

Built with torch's cpp_extension into a private temporary folder (about a minute on 2 cores);
`load()` returns None where it cannot be built (no compiler, no AVX2).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from typing import Any

import torch

from gradtui.engine.fingerprints import sketch as sk

_SOURCE = r"""
#include <torch/extension.h>
#include <immintrin.h>
#include <cmath>
#include <vector>

// (sketch, norm) of x, a contiguous (rows, cols) matrix; signs: its signs in the same order;
// (gr, gc): the grid; entry: the K entry of each of its gr * gc cells.
template <typename T>
void rows_into(const T* px, const T* ps, int64_t rows, int64_t cols, int64_t gr, T* buf, double& sq) {
  double lanes = 0;
  for (int64_t i = 0; i < rows; ++i) {
    T* b = buf + (i % gr) * cols;
    for (int64_t j = 0; j < cols; ++j) {
      const T v = px[i * cols + j] * ps[i * cols + j];
      b[j] += v;
      lanes += double(v) * v;
    }
  }
  sq = lanes;
}

template <>
void rows_into<float>(const float* px, const float* ps, int64_t rows, int64_t cols, int64_t gr, float* buf,
                      double& sq) {
  __m256 squares = _mm256_setzero_ps();
  float rest = 0;
  for (int64_t i = 0; i < rows; ++i) {
    float* __restrict b = buf + (i % gr) * cols;
    const float* __restrict rx = px + i * cols;
    const float* __restrict rs = ps + i * cols;
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8) {
      const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(rx + j), _mm256_loadu_ps(rs + j));
      _mm256_storeu_ps(b + j, _mm256_add_ps(_mm256_loadu_ps(b + j), v));
      squares = _mm256_fmadd_ps(v, v, squares);
    }
    for (; j < cols; ++j) {
      const float v = rx[j] * rs[j];
      b[j] += v;
      rest += v * v;
    }
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, squares);
  sq = rest;
  for (float lane : lanes) sq += lane;
}

template <typename T>
std::vector<torch::Tensor> fused_t(const torch::Tensor& x, const torch::Tensor& signs, int64_t gr, int64_t gc,
                                   const torch::Tensor& entry) {
  const int64_t rows = x.size(0), cols = x.size(1);
  thread_local std::vector<T> buf, cells;
  buf.assign(gr * cols, T(0));
  cells.assign(gr * gc, T(0));
  double sq = 0;
  rows_into<T>(x.data_ptr<T>(), signs.data_ptr<T>(), rows, cols, gr, buf.data(), sq);
  for (int64_t r = 0; r < gr; ++r) {
    const T* br = buf.data() + r * cols;
    T* cr = cells.data() + r * gc;
    int64_t j = 0;
    for (; j + gc <= cols; j += gc)
      for (int64_t c = 0; c < gc; ++c) cr[c] += br[j + c];
    for (int64_t c = 0; j < cols; ++j, ++c) cr[c] += br[j];
  }
  double entries[8] = {0};
  const int64_t* pe = entry.data_ptr<int64_t>();
  for (int64_t c = 0; c < gr * gc; ++c) entries[pe[c]] += cells[c];
  auto out = torch::empty({8}, x.options());
  T* po = out.data_ptr<T>();
  for (int k = 0; k < 8; ++k) po[k] = T(entries[k]);
  return {out, torch::full({}, T(std::sqrt(sq)), x.options())};
}

std::vector<torch::Tensor> fused(torch::Tensor x, torch::Tensor signs, int64_t gr, int64_t gc, torch::Tensor entry) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && signs.is_contiguous() && x.sizes() == signs.sizes());
  TORCH_CHECK(x.scalar_type() == signs.scalar_type() && entry.numel() == gr * gc);
  if (x.scalar_type() == torch::kDouble) return fused_t<double>(x, signs, gr, gc, entry);
  TORCH_CHECK(x.scalar_type() == torch::kFloat);
  return fused_t<float>(x, signs, gr, gc, entry);
}
"""

_entries: dict[tuple[int, int, torch.dtype], tuple[sk.Grid, torch.Tensor]] = {}
counts = {"fused": 0, "fallback": 0}
"""Values sketched by the kernel and by the fallback (small values kept whole count as fallback)."""


def load() -> Any | None:
    """The built kernel's module (`fused(x, signs, grid rows, grid cols, entry)`), or None."""
    try:
        from torch.utils.cpp_extension import load_inline

        return load_inline(
            "gradtui_fused_sketch",
            cpp_sources=_SOURCE,
            functions=["fused"],
            build_directory=tempfile.mkdtemp(prefix="gradtui-fused-"),
            extra_cflags=["-O3", "-mavx2", "-mfma"],
        )
    except Exception as exc:  # noqa: BLE001 - a prototype: no compiler, no AVX2, no ninja
        print(f"fused sketch prototype not built: {type(exc).__name__}: {exc}")
        return None


def mechanism(module: Any, fallback: Callable[[torch.Tensor], sk.Row]) -> Callable[[torch.Tensor], sk.Row]:
    """A fingerprint made by the fused kernel where the value is float32/float64, of at most CHUNK
    elements and held row-major as a matrix (sketch._memory2d's cases but the strided one); else by
    `fallback` (the run's own sketch)."""

    def fingerprint(t: torch.Tensor) -> sk.Row:
        n = t.numel()
        if n <= sk.EXACT_LIMIT or n > sk.CHUNK or t.dtype not in (torch.float32, torch.float64):
            counts["fallback"] += 1
            return fallback(t)
        rows, cols = sk.shape2d(tuple(t.shape))
        if t.dim() == 2 and t.stride() == (1, rows) and rows > 1 and cols > 1:
            held = t.t()
        elif t.is_contiguous():
            held = t.reshape(rows, cols)
        else:
            counts["fallback"] += 1
            return fallback(t)
        key = (held.shape[0], held.shape[1], t.dtype)
        found = _entries.get(key)
        if found is None:
            g = sk.grid(key[0], key[1], t.dtype, torch.device("cpu"))
            found = _entries[key] = (g, g.fold.argmax(1).contiguous())
        g, entry = found
        counts["fused"] += 1
        with torch.no_grad():
            body, norm = module.fused(held.detach(), g.signs.contiguous(), g.rows, g.cols, entry)
        return sk.Row(norm, body, False)

    return fingerprint
