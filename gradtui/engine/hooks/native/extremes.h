// Part of posthooks.cpp's one translation unit (included there, inside its anonymous namespace):
// the min and max of a gradient in one pass over its elements, where torch's CPU kernels take two
// (`amin` and `amax`) or one slower one (`aminmax`, not vectorized as well), equal to torch's.
//
// A float's min and max are values of the tensor, the same whatever the order they are found in,
// but for two cases where torch's answer depends on its way: a NaN (propagated or not, which
// one), and a zero (which of +0.0 and -0.0 is the min or max when both are there). A tensor whose
// min or max comes out a zero, or that holds a NaN, is therefore measured again with torch's own
// kernels, as gradtui/engine/stats/measures.py's `extremes` takes them: the numbers are torch's
// bit for bit in every case, and the Python reads (which call `extremes`) give the same.

#pragma once

// Torch's min and max of a non-empty tensor, as `extremes` takes them: one `aminmax` up to
// `one_pass` contiguous elements, else `amin` and `amax`.
void torch_extremes(const at::Tensor& g, int64_t one_pass, double& lo, double& hi) {
  at::Tensor low, high;
  if (g.numel() > one_pass || !g.is_contiguous()) {
    low = at::cpu::amin(g);
    high = at::cpu::amax(g);
  } else {
    std::tie(low, high) = at::cpu::aminmax(g);
  }
  lo = scalar(low);
  hi = scalar(high);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GRADTUI_ONE_PASS_EXTREMES 1

// The min and max of `n` > 0 floats, 16 at a time in AVX2 registers; `unordered`: a NaN among
// them (then `lo` and `hi` mean nothing). Built for AVX2 whatever the build's flags: it runs only
// where the CPU has it (`one_pass_extremes`).
__attribute__((target("avx2"))) void span_extremes(const float* data, int64_t n, float& lo, float& hi,
                                                   bool& unordered) {
  __m256 low0 = _mm256_set1_ps(INFINITY), high0 = _mm256_set1_ps(-INFINITY);
  __m256 low1 = low0, high1 = high0, nan = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_loadu_ps(data + i), b = _mm256_loadu_ps(data + i + 8);
    low0 = _mm256_min_ps(low0, a);
    high0 = _mm256_max_ps(high0, a);
    low1 = _mm256_min_ps(low1, b);
    high1 = _mm256_max_ps(high1, b);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(a, b, _CMP_UNORD_Q));  // a NaN in either
  }
  alignas(32) float lows[8], highs[8], nans[8];
  _mm256_store_ps(lows, _mm256_min_ps(low0, low1));
  _mm256_store_ps(highs, _mm256_max_ps(high0, high1));
  _mm256_store_ps(nans, nan);
  float l = INFINITY, h = -INFINITY;
  bool bad = false;
  for (int k = 0; k < 8; ++k) {
    l = std::min(l, lows[k]);
    h = std::max(h, highs[k]);
    bad = bad || nans[k] != 0.0f;  // all bits set where a NaN was: itself a NaN, unequal to zero
  }
  for (; i < n; ++i) {
    const float x = data[i];
    bad = bad || std::isnan(x);
    l = std::min(l, x);
    h = std::max(h, x);
  }
  lo = l;
  hi = h;
  unordered = bad;
}

bool has_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}

// The min and max of a contiguous float32 tensor in one pass, split over torch's intra-op threads
// as its own reductions are (past GRAIN_SIZE elements); false where that pass cannot answer for
// torch: no AVX2, a NaN, a zero min or max (see above).
bool one_pass_extremes(const at::Tensor& g, double& lo, double& hi) {
  if (!has_avx2()) return false;
  const float* data = g.const_data_ptr<float>();
  const int64_t n = g.numel();
  int64_t parts = 1;
  if (n > at::internal::GRAIN_SIZE && !at::in_parallel_region()) {
    parts = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), n / at::internal::GRAIN_SIZE));
  }
  float lows[64], highs[64];
  bool nans[64];
  parts = std::min<int64_t>(parts, 64);
  const int64_t step = (n + parts - 1) / parts;
  if (parts == 1) {
    span_extremes(data, n, lows[0], highs[0], nans[0]);
  } else {
    at::parallel_for(0, parts, 1, [&](int64_t begin, int64_t end) {
      for (int64_t k = begin; k < end; ++k) {
        const int64_t from = k * step;
        span_extremes(data + from, std::min(step, n - from), lows[k], highs[k], nans[k]);
      }
    });
  }
  float l = lows[0], h = highs[0];
  for (int64_t k = 0; k < parts; ++k) {
    if (nans[k]) return false;
    l = std::min(l, lows[k]);
    h = std::max(h, highs[k]);
  }
  if (l == 0.0f || h == 0.0f) return false;  // which zero: torch's way says
  lo = static_cast<double>(l);
  hi = static_cast<double>(h);
  return true;
}
#endif

// The min and max of a non-empty plain dense CPU float tensor, as torch gives them (see above):
// one pass of our own over a contiguous float32 tensor, torch's kernels for anything else and
// where that pass cannot answer.
void extremes(const at::Tensor& g, int64_t one_pass, double& lo, double& hi) {
#ifdef GRADTUI_ONE_PASS_EXTREMES
  if (g.scalar_type() == at::kFloat && g.is_contiguous() && one_pass_extremes(g, lo, hi)) return;
#endif
  torch_extremes(g, one_pass, lo, hi);
}
