// Part of posthooks.cpp's one translation unit (included there, inside its anonymous namespace):
// the FunctionPostHook itself, and its calls into Python (the pass's posthook, its progress tick).

#pragma once

// A call into Python made under `gil` failed (its exception is set): give the GIL back and throw
// the exception into the engine, which hands it to the caller of backward().
[[noreturn]] void raise_python_error(PyGILState_STATE gil) {
  python_error error;
  error.persist();
  PyGILState_Release(gil);
  throw error;
}

PyObject* wrap_all(const variable_list& list) {
  PyObject* tuple = PyTuple_New(static_cast<Py_ssize_t>(list.size()));
  if (!tuple) return nullptr;
  for (size_t i = 0; i < list.size(); ++i) {
    PyObject* one = THPVariable_Wrap(list[i]);  // None for an undefined gradient
    if (!one) {
      Py_DECREF(tuple);
      return nullptr;
    }
    PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(i), one);
  }
  return tuple;
}

// Call the pass's Python posthook for `node`; what it returns (None: the gradients as they are).
variable_list call_python(Pass& p, int64_t node, const variable_list& outputs, const variable_list& inputs) {
  PyGILState_STATE gil = PyGILState_Ensure();
  variable_list result = outputs;
  PyObject* sent = wrap_all(outputs);
  PyObject* arrived = sent ? wrap_all(inputs) : nullptr;
  PyObject* res = arrived ? PyObject_CallFunction(p.fallback, "LOO", static_cast<long long>(node), sent, arrived) : nullptr;
  Py_XDECREF(sent);
  Py_XDECREF(arrived);
  bool bad = res == nullptr;
  if (res && res != Py_None) {
    if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != static_cast<Py_ssize_t>(outputs.size())) {
      PyErr_SetString(PyExc_TypeError, "gradtui: a posthook returned the wrong number of gradients");
      bad = true;
    } else {
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(res); ++i) {
        PyObject* one = PyTuple_GET_ITEM(res, i);
        if (one == Py_None) {
          result[i] = at::Tensor();
        } else if (THPVariable_Check(one)) {
          result[i] = THPVariable_Unpack(one);
        } else {
          PyErr_SetString(PyExc_TypeError, "gradtui: a posthook returned something not a tensor");
          bad = true;
          break;
        }
      }
    }
  }
  Py_XDECREF(res);
  if (bad) raise_python_error(gil);
  PyGILState_Release(gil);
  return result;
}

void call_tick(Pass& p) {
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* res = PyObject_CallNoArgs(p.tick);
  if (!res) raise_python_error(gil);
  Py_DECREF(res);
  PyGILState_Release(gil);
}

#include "visit.h"

std::atomic<int64_t> hooks_alive{0};  // every pass's hooks not yet destroyed (a test's count)

struct NativeHook : FunctionPostHook {
  std::shared_ptr<Pass> pass;
  int64_t node;
  NativeHook(std::shared_ptr<Pass> p, int64_t id) : pass(std::move(p)), node(id) { ++hooks_alive; }
  ~NativeHook() override { --hooks_alive; }

  variable_list operator()(const variable_list& outputs, const variable_list& inputs) override {
    Pass& p = *pass;
    if (!p.live) return outputs;
    const int64_t task = torch::autograd::get_current_graph_task_id();
    if (p.task == INT64_MIN) {
      p.task = task;
    } else if (task != p.task) {
      return outputs;  // a nested engine call on this graph: not the pass's own
    }
    if (p.python_only || *p.quit) return call_python(p, node, outputs, inputs);
    const size_t grads0 = p.grads.size(), dims0 = p.dims.size(), values0 = p.values.size();
    bool ok = true;
    const int32_t sent_at = static_cast<int32_t>(grads0);
    for (const auto& g : outputs) {
      p.grads.emplace_back();
      if (!(ok = measure(p, g, p.grads.back()))) break;
    }
    int32_t arrived_at = static_cast<int32_t>(p.grads.size()), arrived_n = -1;
    if (ok && (p.measure_arrived[node] || inputs.size() != 1)) {  // `_arrived`: a tensor seen already is not measured again
      arrived_n = static_cast<int32_t>(inputs.size());
      for (size_t i = 0; ok && i < inputs.size(); ++i) {
        const auto& g = inputs[i];
        const GradRec* same = nullptr;
        if (g.defined()) {
          for (size_t j = 0; j < i && !same; ++j)
            if (inputs[j].defined() && inputs[j].unsafeGetTensorImpl() == g.unsafeGetTensorImpl()) same = &p.grads[arrived_at + j];
          for (size_t j = 0; j < outputs.size() && !same; ++j)
            if (outputs[j].defined() && outputs[j].unsafeGetTensorImpl() == g.unsafeGetTensorImpl()) same = &p.grads[sent_at + j];
        }
        if (same) {
          GradRec copy = *same;
          p.grads.push_back(copy);
        } else {
          p.grads.emplace_back();
          ok = measure(p, g, p.grads.back());
        }
      }
    }
    if (!ok) {  // Python decides (and measures again): nothing of this node is kept here
      p.grads.resize(grads0);
      p.dims.resize(dims0);
      p.values.resize(values0);
      return call_python(p, node, outputs, inputs);
    }
    p.completed[node] = 1;
    p.nodes.push_back({node, sent_at, static_cast<int32_t>(outputs.size()), arrived_at, arrived_n});
    if (p.visit) call_visit(p, node, outputs, inputs);
    const auto now = std::chrono::steady_clock::now();
    if (now - p.last >= p.interval) {
      p.last = now;
      call_tick(p);
    }
    return outputs;
  }
};
