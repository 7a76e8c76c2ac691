// gradtui's compiled posthooks: a planned pass's statistics with no Python per node.
//
// A planned pass (gradtui/engine/planned.py) puts a posthook on the nodes that can change
// values. In Python each hook costs the engine a GIL round trip, a Python object per gradient
// and the hook's own bytecode; here each is a C++ FunctionPostHook that measures what its node
// sent on (and what arrived, where no single producer's output says), exactly as
// gradtui/engine/nowstats.py's `quick_stats` does, and keeps plain numbers. Python is called only
// where the Python hook would decide something: a gradient that is not finite, not a plain CPU
// float tensor, too big to list or to take in one reduction, a quit asked, a progress tick. Then
// the pass's Python posthook runs for that node with the very gradients (and may pause and edit).
// `take` hands what the hooks kept to Python as the Normed, Listed and Stats objects the Python
// hooks make, node by node in the order they ran.
//
// Built by gradtui/engine/native/__init__.py against the torch it runs with (no pybind11: the
// C API keeps the build to a few seconds).

#include <Python.h>

#include <ATen/ops/amax.h>
#include <ATen/ops/amin.h>
#include <ATen/ops/aminmax.h>
#include <ATen/ops/linalg_vector_norm.h>
#include <ATen/ops/sum.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/autograd/python_cpp_function.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

using torch::autograd::FunctionPostHook;
using torch::autograd::variable_list;

namespace {

enum class Kind : uint8_t { None, Normed, Listed, Full };

// One gradient's statistics, as plain numbers.
struct GradRec {
  Kind kind = Kind::None;
  bool f64 = false;
  int32_t dims_at = 0, dims_n = 0;    // its shape, in Pass::dims
  int32_t values_at = 0, values_n = 0;  // a listed gradient's values, in Pass::values
  double norm = 0, lo = 0, hi = 0, mean = 0;
};

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
    out.norm = scalar(at::linalg_vector_norm(g, 2, c10::nullopt, false, c10::nullopt));
    out.kind = Kind::Normed;
    return std::isfinite(out.norm);
  }
  at::Tensor lo, hi;  // gradtui/engine/summary.py's `extremes`: the same kernels, the same zeros
  if (numel > p.limits.one_pass || !g.is_contiguous()) {
    lo = at::amin(g);
    hi = at::amax(g);
  } else {
    std::tie(lo, hi) = at::aminmax(g);
  }
  out.lo = scalar(lo);
  out.hi = scalar(hi);
  const double total = scalar(at::sum(g));
  out.norm = scalar(at::linalg_vector_norm(g, 2, c10::nullopt, false, c10::nullopt));
  out.mean = total / static_cast<double>(numel);
  out.kind = Kind::Full;
  return std::isfinite(out.lo) && std::isfinite(out.hi) && std::isfinite(total) && std::isfinite(out.norm);
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
  if (bad) {
    python_error error;
    error.persist();
    PyGILState_Release(gil);
    throw error;
  }
  PyGILState_Release(gil);
  return result;
}

void call_tick(Pass& p) {
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* res = PyObject_CallNoArgs(p.tick);
  if (!res) {
    python_error error;
    error.persist();
    PyGILState_Release(gil);
    throw error;
  }
  Py_DECREF(res);
  PyGILState_Release(gil);
}

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
    if (ok && p.measure_arrived[node]) {  // `_arrived`: a tensor seen already is not measured again
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
    const auto now = std::chrono::steady_clock::now();
    if (now - p.last >= p.interval) {
      p.last = now;
      call_tick(p);
    }
    return outputs;
  }
};

// ---- the Python type -------------------------------------------------------------------

struct PassObject {
  PyObject_HEAD
  std::shared_ptr<Pass>* pass;
  PyObject *normed, *listed, *stats, *f32, *f64, *cpu;  // how `take` makes what Python makes
};

void drop_refs(Pass& p) {
  Py_CLEAR(p.fallback);
  Py_CLEAR(p.tick);
  Py_CLEAR(p.keep);
}

void pass_dealloc(PyObject* self) {
  auto* obj = reinterpret_cast<PassObject*>(self);
  if (obj->pass) {
    (*obj->pass)->live = false;
    drop_refs(**obj->pass);
    delete obj->pass;
  }
  Py_XDECREF(obj->normed);
  Py_XDECREF(obj->listed);
  Py_XDECREF(obj->stats);
  Py_XDECREF(obj->f32);
  Py_XDECREF(obj->f64);
  Py_XDECREF(obj->cpu);
  Py_TYPE(self)->tp_free(self);
}

// A tuple subclass's instance (a NamedTuple's) of `n` items, to be filled.
PyObject* new_tuple_of(PyObject* type, Py_ssize_t n) {
  auto* cls = reinterpret_cast<PyTypeObject*>(type);
  return cls->tp_alloc(cls, n);
}

// One gradient's shape: the last one made again if the same (most gradients share a few shapes).
PyObject* shape_of(Pass& p, const GradRec& g, std::vector<std::pair<std::vector<int64_t>, PyObject*>>& shapes) {
  const int64_t* dims = p.dims.data() + g.dims_at;
  for (auto& [known, tuple] : shapes) {
    if (static_cast<int32_t>(known.size()) == g.dims_n && std::equal(known.begin(), known.end(), dims)) {
      Py_INCREF(tuple);
      return tuple;
    }
  }
  PyObject* shape = PyTuple_New(g.dims_n);
  for (int32_t k = 0; shape && k < g.dims_n; ++k) PyTuple_SET_ITEM(shape, k, PyLong_FromLongLong(dims[k]));
  if (shape && shapes.size() < 16) {
    Py_INCREF(shape);
    shapes.emplace_back(std::vector<int64_t>(dims, dims + g.dims_n), shape);
  }
  return shape;
}

using Shapes = std::vector<std::pair<std::vector<int64_t>, PyObject*>>;

// One gradient's statistics as Python's hooks make them (None, Normed, Listed or Stats).
PyObject* stats_of(PassObject* obj, Pass& p, const GradRec& g, Shapes& shapes) {
  if (g.kind == Kind::None) Py_RETURN_NONE;
  PyObject* dtype = g.f64 ? obj->f64 : obj->f32;
  PyObject* shape = shape_of(p, g, shapes);
  if (!shape) return nullptr;
  if (g.kind == Kind::Full) {
    PyObject* args = Py_BuildValue("(NOOddddi)", shape, dtype, obj->cpu, g.norm, g.lo, g.hi, g.mean, 0);
    PyObject* made = args ? PyObject_Call(obj->stats, args, nullptr) : nullptr;
    Py_XDECREF(args);
    return made;
  }
  PyObject* middle;
  if (g.kind == Kind::Normed) {
    middle = PyFloat_FromDouble(g.norm);
  } else {
    middle = PyTuple_New(g.values_n);
    for (int32_t k = 0; middle && k < g.values_n; ++k) PyTuple_SET_ITEM(middle, k, PyFloat_FromDouble(p.values[g.values_at + k]));
  }
  PyObject* made = middle ? new_tuple_of(g.kind == Kind::Normed ? obj->normed : obj->listed, 4) : nullptr;
  if (!made) {
    Py_DECREF(shape);
    Py_XDECREF(middle);
    return nullptr;
  }
  Py_INCREF(dtype);
  PyTuple_SET_ITEM(made, 0, shape);
  PyTuple_SET_ITEM(made, 1, dtype);
  PyTuple_SET_ITEM(made, 2, middle);
  PyTuple_SET_ITEM(made, 3, PyLong_FromLong(0));
  return made;
}

PyObject* stats_tuple(PassObject* obj, Pass& p, int32_t at, int32_t n, Shapes& shapes) {
  PyObject* out = PyTuple_New(n);
  for (int32_t k = 0; out && k < n; ++k) {
    PyObject* one = stats_of(obj, p, p.grads[at + k], shapes);
    if (!one) {
      Py_CLEAR(out);
      break;
    }
    PyTuple_SET_ITEM(out, k, one);
  }
  return out;
}

// take() -> (nodes, sent, arrived): the nodes the hooks kept since the last take, in the order
// they ran, what each sent on, and [(node, what arrived)] where that was measured.
PyObject* pass_take(PyObject* self, PyObject*) {
  auto* obj = reinterpret_cast<PassObject*>(self);
  Pass& p = **obj->pass;
  const auto count = static_cast<Py_ssize_t>(p.nodes.size());
  PyObject* nodes = PyList_New(count);
  PyObject* sent = PyList_New(count);
  PyObject* arrived = PyList_New(0);
  bool ok = nodes && sent && arrived;
  Shapes shapes;
  for (Py_ssize_t i = 0; ok && i < count; ++i) {
    const NodeRec& r = p.nodes[i];
    PyList_SET_ITEM(nodes, i, PyLong_FromLongLong(r.node));
    PyObject* out = stats_tuple(obj, p, r.sent_at, r.sent_n, shapes);
    if (!out) {
      ok = false;
      break;
    }
    PyList_SET_ITEM(sent, i, out);
    if (r.arrived_n >= 0) {
      PyObject* in = stats_tuple(obj, p, r.arrived_at, r.arrived_n, shapes);
      PyObject* pair = in ? Py_BuildValue("(LN)", static_cast<long long>(r.node), in) : nullptr;
      ok = pair && PyList_Append(arrived, pair) == 0;
      Py_XDECREF(pair);
    }
  }
  for (auto& known : shapes) Py_DECREF(known.second);
  p.nodes.clear();
  p.grads.clear();
  p.dims.clear();
  p.values.clear();
  if (!ok) {
    Py_XDECREF(nodes);
    Py_XDECREF(sent);
    Py_XDECREF(arrived);
    return nullptr;
  }
  return Py_BuildValue("(NNN)", nodes, sent, arrived);
}

// hook(nodes, ids) -> the ids not hooked (not C++ nodes: Python hooks those).
PyObject* pass_hook(PyObject* self, PyObject* args) {
  auto* obj = reinterpret_cast<PassObject*>(self);
  PyObject *nodes, *ids;
  if (!PyArg_ParseTuple(args, "O!O!", &PyList_Type, &nodes, &PyList_Type, &ids)) return nullptr;
  Pass& p = **obj->pass;
  PyObject* left = PyList_New(0);
  for (Py_ssize_t k = 0; left && k < PyList_GET_SIZE(ids); ++k) {
    PyObject* id_obj = PyList_GET_ITEM(ids, k);
    const long long id = PyLong_AsLongLong(id_obj);
    if (id < 0 || id >= PyList_GET_SIZE(nodes) || id >= p.size) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_IndexError, "gradtui: a node id out of range");
      Py_CLEAR(left);
      break;
    }
    PyObject* node = PyList_GET_ITEM(nodes, id);
    if (!torch::autograd::THPCppFunction_Check(node)) {
      if (PyList_Append(left, id_obj) != 0) Py_CLEAR(left);
      continue;
    }
    auto& cdata = reinterpret_cast<torch::autograd::THPCppFunction*>(node)->cdata;
    const uintptr_t key = cdata->add_post_hook(std::make_unique<NativeHook>(*obj->pass, id));
    p.hooks.emplace_back(id, key);
  }
  return left;
}

// close(nodes): the hooks do nothing from now on, and are taken off the nodes still alive in
// `nodes` (a retained graph's); the pass lets go of its Python objects.
PyObject* pass_close(PyObject* self, PyObject* args) {
  auto* obj = reinterpret_cast<PassObject*>(self);
  PyObject* nodes;
  if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &nodes)) return nullptr;
  Pass& p = **obj->pass;
  p.live = false;
  for (const auto& [id, key] : p.hooks) {
    if (id < PyList_GET_SIZE(nodes)) {
      PyObject* node = PyList_GET_ITEM(nodes, id);
      if (torch::autograd::THPCppFunction_Check(node))
        reinterpret_cast<torch::autograd::THPCppFunction*>(node)->cdata->del_post_hook(key);
    }
  }
  p.hooks.clear();
  drop_refs(p);
  Py_RETURN_NONE;
}

PyObject* pass_python_only(PyObject* self, PyObject*) {
  (**reinterpret_cast<PassObject*>(self)->pass).python_only = true;
  Py_RETURN_NONE;
}

PyObject* pass_hooked(PyObject* self, PyObject*) {
  return PyLong_FromSize_t((**reinterpret_cast<PassObject*>(self)->pass).hooks.size());
}

PyMethodDef pass_methods[] = {
    {"hook", pass_hook, METH_VARARGS, "hook(nodes, ids) -> the ids not hooked (not C++ nodes)"},
    {"take", pass_take, METH_NOARGS, "take() -> (nodes, sent, arrived) kept since the last take"},
    {"close", pass_close, METH_VARARGS, "close(nodes): inert from now on, hooks taken off live nodes"},
    {"python_only", pass_python_only, METH_NOARGS, "every hook defers to the Python posthook from now on"},
    {"hooked", pass_hooked, METH_NOARGS, "how many nodes carry a hook of this pass"},
    {nullptr, nullptr, 0, nullptr}};

PyTypeObject PassType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// make(completed, quit, measure_arrived, full, limits, interval_s, fallback, tick, kinds) -> a pass.
PyObject* make(PyObject*, PyObject* args) {
  PyObject *completed, *quit, *arrived, *fallback, *tick, *kinds;
  int full;
  long long values_limit, chunk, one_pass;
  double interval;
  if (!PyArg_ParseTuple(args, "O!O!O!p(LLL)dOOO", &PyByteArray_Type, &completed, &PyByteArray_Type, &quit,
                        &PyBytes_Type, &arrived, &full, &values_limit, &chunk, &one_pass, &interval, &fallback,
                        &tick, &kinds))
    return nullptr;
  PyObject *normed, *listed, *stats, *f32, *f64, *cpu;
  if (!PyArg_ParseTuple(kinds, "OOOOOO", &normed, &listed, &stats, &f32, &f64, &cpu)) return nullptr;
  if (PyByteArray_GET_SIZE(quit) < 1 || PyBytes_GET_SIZE(arrived) != PyByteArray_GET_SIZE(completed)) {
    PyErr_SetString(PyExc_ValueError, "gradtui: make() got buffers of the wrong sizes");
    return nullptr;
  }
  auto* obj = PyObject_New(PassObject, &PassType);
  if (!obj) return nullptr;
  auto pass = std::make_shared<Pass>();
  pass->full = full;
  pass->limits = {values_limit, chunk, one_pass};
  pass->quit = PyByteArray_AS_STRING(quit);
  pass->completed = PyByteArray_AS_STRING(completed);
  pass->size = PyByteArray_GET_SIZE(completed);
  const char* want = PyBytes_AS_STRING(arrived);
  pass->measure_arrived.assign(want, want + pass->size);
  pass->plain = at::empty({1}, at::kFloat).key_set();
  pass->interval = std::chrono::nanoseconds(static_cast<int64_t>(interval * 1e9));
  pass->last = std::chrono::steady_clock::now();
  Py_INCREF(fallback);
  Py_INCREF(tick);
  pass->fallback = fallback;
  pass->tick = tick;
  pass->keep = Py_BuildValue("(OO)", completed, quit);
  obj->pass = new std::shared_ptr<Pass>(std::move(pass));
  for (PyObject** slot : {&normed, &listed, &stats, &f32, &f64, &cpu}) Py_INCREF(*slot);
  obj->normed = normed;
  obj->listed = listed;
  obj->stats = stats;
  obj->f32 = f32;
  obj->f64 = f64;
  obj->cpu = cpu;
  return reinterpret_cast<PyObject*>(obj);
}

// walk(roots) -> (nodes, nexts, producer, root_ids), gradtui/engine/graph.py's `_walk` of the
// graph from `roots` (breadth-first, ids in the order found), or None if a root is no C++ node.
PyObject* walk(PyObject*, PyObject* args) {
  PyObject* roots;
  if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &roots)) return nullptr;
  for (Py_ssize_t k = 0; k < PyList_GET_SIZE(roots); ++k) {
    PyObject* root = PyList_GET_ITEM(roots, k);
    if (root != Py_None && !torch::autograd::THPCppFunction_Check(root)) Py_RETURN_NONE;
  }
  std::vector<c10::intrusive_ptr<torch::autograd::Node>> order;
  std::unordered_map<const torch::autograd::Node*, int64_t> ids;
  PyObject* nodes = PyList_New(0);
  PyObject* nexts = PyList_New(0);
  PyObject* producer = PyList_New(0);
  PyObject* root_ids = PyList_New(0);
  bool ok = nodes && nexts && producer && root_ids;
  for (Py_ssize_t k = 0; ok && k < PyList_GET_SIZE(roots); ++k) {
    PyObject* root = PyList_GET_ITEM(roots, k);
    if (root == Py_None) continue;
    const auto& cdata = reinterpret_cast<torch::autograd::THPCppFunction*>(root)->cdata;
    auto found = ids.find(cdata.get());
    int64_t id;
    if (found == ids.end()) {
      id = static_cast<int64_t>(order.size());
      ids.emplace(cdata.get(), id);
      order.push_back(cdata);
      ok = PyList_Append(nodes, root) == 0 && PyList_Append(producer, Py_None) == 0;
    } else {
      id = found->second;
    }
    PyObject* number = PyLong_FromLongLong(id);
    ok = ok && number && PyList_Append(root_ids, number) == 0;
    Py_XDECREF(number);
  }
  for (size_t here = 0; ok && here < order.size(); ++here) {
    const auto& edges = order[here]->next_edges();
    PyObject* receivers = PyTuple_New(static_cast<Py_ssize_t>(edges.size()));
    ok = receivers != nullptr;
    for (size_t slot = 0; ok && slot < edges.size(); ++slot) {
      const auto& function = edges[slot].function;
      if (!function) {
        Py_INCREF(Py_None);
        PyTuple_SET_ITEM(receivers, slot, Py_None);
        continue;
      }
      auto found = ids.find(function.get());
      int64_t there;
      if (found == ids.end()) {
        there = static_cast<int64_t>(order.size());
        ids.emplace(function.get(), there);
        order.push_back(function);
        PyObject* obj = torch::autograd::functionToPyObject(function);
        PyObject* pair = obj ? Py_BuildValue("(nn)", static_cast<Py_ssize_t>(here), static_cast<Py_ssize_t>(slot)) : nullptr;
        ok = pair && PyList_Append(nodes, obj) == 0 && PyList_Append(producer, pair) == 0;
        Py_XDECREF(obj);
        Py_XDECREF(pair);
      } else {
        there = found->second;
        Py_INCREF(Py_None);  // a second sender
        ok = PyList_SetItem(producer, there, Py_None) == 0;
      }
      PyTuple_SET_ITEM(receivers, slot, PyLong_FromLongLong(there));
    }
    ok = ok && PyList_Append(nexts, receivers) == 0;
    Py_XDECREF(receivers);
  }
  if (!ok) {
    Py_XDECREF(nodes);
    Py_XDECREF(nexts);
    Py_XDECREF(producer);
    Py_XDECREF(root_ids);
    return nullptr;
  }
  return Py_BuildValue("(NNNN)", nodes, nexts, producer, root_ids);
}

PyObject* alive(PyObject*, PyObject*) { return PyLong_FromLongLong(hooks_alive.load()); }

PyMethodDef module_methods[] = {
    {"make", make, METH_VARARGS, "make(completed, quit, measure_arrived, full, limits, interval_s, fallback, tick, kinds)"},
    {"walk", walk, METH_VARARGS, "walk(roots) -> (nodes, nexts, producer, root_ids), or None (a root no C++ node)"},
    {"alive", alive, METH_NOARGS, "how many compiled hooks exist, on any node of any pass"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "gradtui_posthooks", "gradtui's compiled posthooks", -1, module_methods};

}  // namespace

PyMODINIT_FUNC PyInit_gradtui_posthooks() {
  PassType.tp_name = "gradtui_posthooks.Pass";
  PassType.tp_basicsize = sizeof(PassObject);
  PassType.tp_flags = Py_TPFLAGS_DEFAULT;
  PassType.tp_doc = "A planned pass's compiled posthooks";
  PassType.tp_methods = pass_methods;
  PassType.tp_dealloc = pass_dealloc;
  if (PyType_Ready(&PassType) < 0) return nullptr;
  return PyModule_Create(&module_def);
}
