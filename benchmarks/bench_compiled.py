"""A floor no pure-Python hook reaches: the planned posthooks compiled (C++), for the floor group.

gradtui's planned hooks (gradtui.engine.hooks.planned) are Python: the engine takes the GIL, wraps
each gradient in a Python object and calls the hook, whose norm is one more Python call into
the dispatcher. This prototype puts the same posthooks on the same nodes as C++
`FunctionPostHook`s: each takes the norm of every gradient its node sends, checks it is finite
and keeps it, with no Python at all until the pass is over. It is a measuring stick for the hooks' cost
(what another mechanism costs, beside the pure-Python prototype's floor row), not part of
gradtui: it needs a C++ compiler and ninja (`pip install '.[bench]'`), and torch's
`load_inline` builds it once (~1 min) into torch's extension cache.
"""

from __future__ import annotations

import sys
from typing import Any

SOURCE = r"""
#include <torch/extension.h>
#include <torch/csrc/autograd/python_cpp_function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <cmath>

using namespace torch::autograd;

static std::vector<double> norms;   // what the hooks measured, in the order they ran
static long long first_bad = -1;    // the first node whose output was not finite

struct NormHook : FunctionPostHook {
  long long node;
  explicit NormHook(long long id) : node(id) {}
  variable_list operator()(const variable_list& outputs, const variable_list& inputs) override {
    for (const auto& grad : outputs) {
      if (grad.defined()) {
        double norm = at::linalg_vector_norm(grad, 2, c10::nullopt, false, c10::nullopt).item<double>();
        norms.push_back(norm);
        if (!std::isfinite(norm) && first_bad < 0) first_bad = node;
      }
    }
    return outputs;
  }
};

// Put a NormHook on nodes[i] for each i of ids (C++ nodes only: a custom Function is Python's).
void hook_nodes(py::list nodes, std::vector<long long> ids) {
  for (auto i : ids) {
    PyObject* obj = nodes[i].ptr();
    TORCH_CHECK(THPCppFunction_Check(obj), "not a C++ autograd node");
    ((THPCppFunction*)obj)->cdata->add_post_hook(std::make_unique<NormHook>(i));
  }
}

// The norms measured since the last call, and the first node whose output was not finite (-1).
std::tuple<std::vector<double>, long long> take() {
  auto out = std::make_tuple(std::move(norms), first_bad);
  norms.clear();
  first_bad = -1;
  return out;
}
"""


def compiled_hooks() -> tuple[Any, str]:
    """The built extension (with `hook_nodes(nodes, ids)` and `take()`) and "", or None and why it
    could not be built."""
    print(
        "  (the compiled posthooks: loaded from torch's extension cache, or built once, ~1 min)",
        file=sys.stderr,
        flush=True,
    )
    try:
        from torch.utils.cpp_extension import load_inline

        module = load_inline(
            "gradtui_bench_posthooks",
            cpp_sources=[SOURCE],
            functions=["hook_nodes", "take"],
            extra_cflags=["-O2"],
            verbose=False,
        )
    except Exception as exc:  # no compiler, no ninja, headers missing: the row says so
        first_line = next(iter(str(exc).strip().splitlines()), "")
        return None, f"{type(exc).__name__}: {first_line[:120]}"
    return module, ""
