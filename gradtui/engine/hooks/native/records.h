// Part of posthooks.cpp's one translation unit (included there, inside its anonymous namespace):
// what a compiled posthook keeps of a gradient, and how it measures one as
// gradtui/engine/stats/immediate.py's `quick_stats` does.

#pragma once

enum class Kind : uint8_t { None, Normed, Listed, Full };

// One gradient's statistics, as plain numbers; those measured of a big gradient are named as the
// Stats fields they fill (`MEASURED`).
struct GradRec {
  Kind kind = Kind::None;
  bool f64 = false;
  int32_t dims_at = 0, dims_n = 0;    // its shape, in Pass::dims
  int32_t values_at = 0, values_n = 0;  // a listed gradient's values, in Pass::values
  double norm = 0, min = 0, max = 0, mean = 0;
};

// The statistics a compiled posthook measures of a big gradient (Kind::Full), each by the name of
// the Stats field it fills: `take` hands them to the factory (gradtui.protocol.stats.full_stats) as
// keywords of these names, so Python reads them by name, never by position. The norm, then the
// Python reads' description in its order (gradtui/engine/stats/measures.py's `MEASURED`): a
// statistic measured here is a member above, a line here and its kernel in `measure_wide`
// (tests/protocol/test_one_statistic.py checks the names).
struct Measured {
  const char* name;
  double GradRec::*member;
};
constexpr Measured MEASURED[] = {
    {"norm", &GradRec::norm},
    {"min", &GradRec::min},
    {"max", &GradRec::max},
    {"mean", &GradRec::mean},
};
constexpr size_t MEASURED_N = sizeof(MEASURED) / sizeof(MEASURED[0]);

// One node that ran: what it sent on (and what arrived, when measured) in Pass::grads.
struct NodeRec {
  int64_t node;
  int32_t sent_at, sent_n;
  int32_t arrived_at, arrived_n;  // arrived_n -1: not measured (its producer's output says)
};

struct Limits {
  int64_t values_limit, chunk, one_pass;
};

// A pass's shared state. Its Python references are taken at `make` and dropped at `close`,
// both with the GIL; a hook that outlives the pass (on a retained graph) sees `live` false.
struct Pass {
  bool live = true;
  bool python_only = false;  // stepping from a pause: every hook defers to Python
  bool full = false;
  int64_t task = INT64_MIN;
  Limits limits{};
  const volatile char* quit = nullptr;  // RunQuit's flag byte
  char* completed = nullptr;            // the pass's record: 1 per node once it ran
  Py_ssize_t size = 0;
  std::vector<uint8_t> measure_arrived;
  c10::DispatchKeySet plain;  // a plain dense CPU tensor's keys: any other kind goes to Python
  std::chrono::steady_clock::time_point last;
  std::chrono::nanoseconds interval{0};
  PyObject *fallback = nullptr, *tick = nullptr, *keep = nullptr;  // keep: the buffers' owners
  PyObject* visit = nullptr;  // called with every node the hooks measured (visit.h), or null
  std::vector<GradRec> grads;
  std::vector<int64_t> dims;
  std::vector<double> values;
  std::vector<NodeRec> nodes;
  std::vector<std::pair<int64_t, uintptr_t>> hooks;  // node id, hook key
};

// A 0-d float or double CPU result's value, as `.item()` gives it (read in place: no dispatch).
double scalar(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble ? *t.const_data_ptr<double>() : static_cast<double>(*t.const_data_ptr<float>());
}

// The statistics of `MEASURED` but the norm (taken apart: the bulk fetch fuses it with other norms)
// of a non-empty plain dense CPU float tensor: the one place the compiled code measures them, for
// the posthooks' big gradients (`measure`) and the bulk fetch's wide ones (fetch.h) alike. min and
// max equal to those gradtui/engine/stats/measures.py's `extremes` takes (torch's, the same zeros),
// in one pass of extremes.h's where it can answer for torch, else with the same kernels as `extremes`;
// the mean as the sum over the count (a float32 sum widened to a double, as `.item()` gives it, then
// divided in double, as Python's `total / numel`): finite exactly when the sum is.
// The min and max of a non-empty plain dense CPU float tensor, as torch gives them (extremes.h).
void extremes(const at::Tensor& g, int64_t one_pass, double& lo, double& hi);

void measure_wide(const at::Tensor& g, int64_t one_pass, GradRec& out) {
  extremes(g, one_pass, out.min, out.max);
  out.mean = scalar(at::cpu::sum(g, at::IntArrayRef{})) / static_cast<double>(g.numel());
}

// Statistics of one gradient as `quick_stats` makes them; false: Python must decide.
bool measure(Pass& p, const at::Tensor& g, GradRec& out) {
  if (!g.defined()) {
    out.kind = Kind::None;
    return true;
  }
  if (g.key_set() != p.plain || g.requires_grad()) return false;
  const auto type = g.scalar_type();
  if (type != at::kFloat && type != at::kDouble) return false;
  const int64_t numel = g.numel();
  if (numel <= 0 || numel > p.limits.chunk) return false;
  out.f64 = type == at::kDouble;
  out.dims_at = static_cast<int32_t>(p.dims.size());
  out.dims_n = static_cast<int32_t>(g.dim());
  for (auto size : g.sizes()) p.dims.push_back(size);
  if (numel <= p.limits.values_limit) {  // listed, in row-major order, summed as Python sums
    const at::Tensor flat = g.is_contiguous() ? g : g.contiguous();
    const size_t at = p.values.size();
    double total = 0;
    if (out.f64) {
      const double* data = flat.const_data_ptr<double>();
      p.values.insert(p.values.end(), data, data + numel);
    } else {
      const float* data = flat.const_data_ptr<float>();
      for (int64_t i = 0; i < numel; ++i) p.values.push_back(static_cast<double>(data[i]));
    }
    for (int64_t i = 0; i < numel; ++i) total += p.values[at + i];
    if (!std::isfinite(total)) return false;  // (the caller drops what this node added)
    out.kind = Kind::Listed;
    out.values_at = static_cast<int32_t>(at);
    out.values_n = static_cast<int32_t>(numel);
    return true;
  }
  at::AutoDispatchBelowADInplaceOrView below_autograd;  // none requires grad: the same kernels, less dispatch
  if (!p.full) {
    out.norm = scalar(at::cpu::linalg_vector_norm(g, 2, c10::nullopt, false, c10::nullopt));
    out.kind = Kind::Normed;
    return std::isfinite(out.norm);
  }
  measure_wide(g, p.limits.one_pass, out);
  out.norm = scalar(at::cpu::linalg_vector_norm(g, 2, c10::nullopt, false, c10::nullopt));
  out.kind = Kind::Full;
  return std::isfinite(out.min) && std::isfinite(out.max) && std::isfinite(out.mean) && std::isfinite(out.norm);
}
