// gradtui's compiled posthooks: a planned pass's statistics with no Python per node.
//
// A planned pass (gradtui/engine/hooks/planned.py) puts a posthook on the nodes that can change
// values. In Python each hook costs the engine a GIL round trip, a Python object per gradient
// and the hook's own bytecode; here each is a C++ FunctionPostHook that measures what its node
// sent on (and what arrived, where no single producer's output says), exactly as
// gradtui/engine/stats/immediate.py's `quick_stats` does, and keeps plain numbers. Python is called only
// where the Python hook would decide something: a gradient that is not finite, not a plain CPU
// float tensor, too big to list or to take in one reduction, a quit asked, a progress tick. Then
// the pass's Python posthook runs for that node with the very gradients (and may pause and edit).
// `take` hands what the hooks kept to Python as the Normed, Listed and Stats objects the Python
// hooks make, node by node in the order they ran.
//
// Built by gradtui/engine/hooks/native/__init__.py against the torch it runs with (no pybind11: the
// C API keeps the build to a few seconds).

#include <Python.h>

// The CPU kernels themselves (at::cpu::), as the dispatcher would pick them for a plain dense CPU
// tensor below autograd: the same numbers, without a dispatch per reduction.
#include <ATen/Parallel.h>
#include <ATen/TensorIterator.h>  // at::internal::GRAIN_SIZE
#include <ATen/ops/add_cpu_dispatch.h>
#include <ATen/ops/amax_cpu_dispatch.h>
#include <ATen/ops/amin_cpu_dispatch.h>
#include <ATen/ops/aminmax_cpu_dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/linalg_vector_norm_cpu_dispatch.h>
#include <ATen/ops/mm_cpu_dispatch.h>
#include <ATen/ops/mul_cpu_dispatch.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/sum_cpu_dispatch.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/csrc/autograd/python_cpp_function.h>
#include <torch/csrc/autograd/python_variable.h>

#include <algorithm>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

using torch::autograd::FunctionPostHook;
using torch::autograd::variable_list;

namespace {

// The C++ node behind a Python node object that THPCppFunction_Check accepted.
const c10::intrusive_ptr<torch::autograd::Node>& cdata_of(PyObject* node) {
  return reinterpret_cast<torch::autograd::THPCppFunction*>(node)->cdata;
}

// A Python list of `values`, each made by `make` (PyFloat_FromDouble, ...); null if one could not be.
template <typename T, typename Make>
PyObject* list_of(const std::vector<T>& values, Make make) {
  PyObject* list = PyList_New(static_cast<Py_ssize_t>(values.size()));
  for (size_t i = 0; list && i < values.size(); ++i) {
    PyObject* one = make(values[i]);
    if (!one) {
      Py_CLEAR(list);
      break;
    }
    PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), one);
  }
  return list;
}

#include "records.h"
#include "extremes.h"
#include "hook.h"
#include "walk.h"
#include "fetch.h"
#include "sketch.h"

// ---- the Python type -------------------------------------------------------------------

struct PassObject {
  PyObject_HEAD
  std::shared_ptr<Pass>* pass;
  PyObject *normed, *listed, *stats, *f32, *f64, *cpu;  // how `take` makes what Python makes
  PyObject *stats_names, *zero;  // the keywords `stats` is called with (`MEASURED`'s among them), and 0
};

// The keywords a big gradient's statistics are handed to the factory with: its shape, dtype and
// device, each of `MEASURED` by its name, its non-finite count (0: a measured gradient is finite).
PyObject* stats_names_tuple() {
  PyObject* names = PyTuple_New(3 + MEASURED_N + 1);
  const char* fixed[] = {"shape", "dtype", "device"};
  for (Py_ssize_t k = 0; names && k < 3; ++k) PyTuple_SET_ITEM(names, k, PyUnicode_InternFromString(fixed[k]));
  for (size_t k = 0; names && k < MEASURED_N; ++k)
    PyTuple_SET_ITEM(names, 3 + k, PyUnicode_InternFromString(MEASURED[k].name));
  if (names) PyTuple_SET_ITEM(names, 3 + MEASURED_N, PyUnicode_InternFromString("nonfinite"));
  for (Py_ssize_t k = 0; names && k < PyTuple_GET_SIZE(names); ++k) {
    if (!PyTuple_GET_ITEM(names, k)) {
      Py_CLEAR(names);
    }
  }
  return names;
}

void drop_refs(Pass& p) {
  Py_CLEAR(p.fallback);
  Py_CLEAR(p.tick);
  Py_CLEAR(p.keep);
  Py_CLEAR(p.visit);
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
  Py_XDECREF(obj->stats_names);
  Py_XDECREF(obj->zero);
  Py_TYPE(self)->tp_free(self);
}

// A tuple subclass's instance (a NamedTuple's) of `n` items, to be filled.
PyObject* new_tuple_of(PyObject* type, Py_ssize_t n) {
  auto* cls = reinterpret_cast<PyTypeObject*>(type);
  return cls->tp_alloc(cls, n);
}

using Shapes = std::vector<std::pair<std::vector<int64_t>, PyObject*>>;

// One gradient's shape: one made already if the same (most gradients share a few shapes).
PyObject* shape_of(Pass& p, const GradRec& g, Shapes& shapes) {
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

// One gradient's statistics as Python's hooks make them (None, Normed, Listed or Stats).
PyObject* stats_of(PassObject* obj, Pass& p, const GradRec& g, Shapes& shapes) {
  if (g.kind == Kind::None) Py_RETURN_NONE;
  PyObject* dtype = g.f64 ? obj->f64 : obj->f32;
  PyObject* shape = shape_of(p, g, shapes);
  if (!shape) return nullptr;
  if (g.kind == Kind::Full) {  // the factory called by keyword: shape, dtype, device, MEASURED..., nonfinite
    PyObject* args[3 + MEASURED_N + 1] = {shape, dtype, obj->cpu};
    bool ok = true;
    for (size_t k = 0; k < MEASURED_N; ++k) ok = (args[3 + k] = PyFloat_FromDouble(g.*MEASURED[k].member)) && ok;
    args[3 + MEASURED_N] = obj->zero;
    PyObject* made = ok ? PyObject_Vectorcall(obj->stats, args, 0, obj->stats_names) : nullptr;
    Py_DECREF(shape);
    for (size_t k = 0; k < MEASURED_N; ++k) Py_XDECREF(args[3 + k]);
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

// Does every gradient that arrives at `node` live on the CPU (so the engine runs it on the
// thread that called it, where every other compiled hook of the pass runs)?
bool on_cpu(const torch::autograd::Node& node) {
  for (uint32_t i = 0; i < node.num_inputs(); ++i)
    if (!node.input_metadata(i).device().is_cpu()) return false;
  return true;
}

// hook(nodes, ids) -> the ids not hooked (not C++ nodes, or not CPU ones: Python hooks those).
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
    // Not a C++ node, or one that runs on a device's thread (a CPU-rooted pass can hold some):
    // the Python hook, which the GIL keeps in step with the calling thread's.
    if (!torch::autograd::THPCppFunction_Check(node) || !on_cpu(*cdata_of(node))) {
      if (PyList_Append(left, id_obj) != 0) Py_CLEAR(left);
      continue;
    }
    const uintptr_t key = cdata_of(node)->add_post_hook(std::make_unique<NativeHook>(*obj->pass, id));
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
        cdata_of(node)->del_post_hook(key);
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

// visit(f): from now on f(node, sent, arrived) is called for every node the hooks measured
// (visit.h); None: no more.
PyObject* pass_visit(PyObject* self, PyObject* f) {
  Pass& p = **reinterpret_cast<PassObject*>(self)->pass;
  if (f != Py_None && !PyCallable_Check(f)) {
    PyErr_SetString(PyExc_TypeError, "gradtui: visit() takes a callable or None");
    return nullptr;
  }
  Py_CLEAR(p.visit);
  if (f != Py_None && p.live) {
    Py_INCREF(f);
    p.visit = f;
  }
  Py_RETURN_NONE;
}

PyMethodDef pass_methods[] = {
    {"hook", pass_hook, METH_VARARGS, "hook(nodes, ids) -> the ids not hooked (not C++ nodes, or not CPU ones)"},
    {"take", pass_take, METH_NOARGS, "take() -> (nodes, sent, arrived) kept since the last take"},
    {"close", pass_close, METH_VARARGS, "close(nodes): inert from now on, hooks taken off live nodes"},
    {"python_only", pass_python_only, METH_NOARGS, "every hook defers to the Python posthook from now on"},
    {"hooked", pass_hooked, METH_NOARGS, "how many nodes carry a hook of this pass"},
    {"visit", pass_visit, METH_O, "visit(f): f(node, sent, arrived) for every node the hooks measure (None: none)"},
    {nullptr, nullptr, 0, nullptr}};

PyTypeObject PassType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// make(completed, quit, producer, full, limits, interval_s, fallback, tick, kinds) -> a pass;
// `producer`: the plan's, per node (None: what arrives there is measured).
PyObject* make(PyObject*, PyObject* args) {
  PyObject *completed, *quit, *arrived, *fallback, *tick, *kinds;
  int full;
  long long values_limit, chunk, one_pass;
  double interval;
  if (!PyArg_ParseTuple(args, "O!O!O!p(LLL)dOOO", &PyByteArray_Type, &completed, &PyByteArray_Type, &quit,
                        &PyList_Type, &arrived, &full, &values_limit, &chunk, &one_pass, &interval, &fallback,
                        &tick, &kinds))
    return nullptr;
  PyObject *normed, *listed, *stats, *f32, *f64, *cpu;
  if (!PyArg_ParseTuple(kinds, "OOOOOO", &normed, &listed, &stats, &f32, &f64, &cpu)) return nullptr;
  if (PyByteArray_GET_SIZE(quit) < 1 || PyList_GET_SIZE(arrived) != PyByteArray_GET_SIZE(completed)) {
    PyErr_SetString(PyExc_ValueError, "gradtui: make() got buffers of the wrong sizes");
    return nullptr;
  }
  PyObject* stats_names = stats_names_tuple();
  PyObject* zero = stats_names ? PyLong_FromLong(0) : nullptr;
  auto* obj = zero ? PyObject_New(PassObject, &PassType) : nullptr;
  if (!obj) {
    Py_XDECREF(stats_names);
    Py_XDECREF(zero);
    return nullptr;
  }
  obj->stats_names = stats_names;
  obj->zero = zero;
  auto pass = std::make_shared<Pass>();
  pass->full = full;
  pass->limits = {values_limit, chunk, one_pass};
  pass->quit = PyByteArray_AS_STRING(quit);
  pass->completed = PyByteArray_AS_STRING(completed);
  pass->size = PyByteArray_GET_SIZE(completed);
  pass->measure_arrived.resize(pass->size);
  for (Py_ssize_t i = 0; i < pass->size; ++i) pass->measure_arrived[i] = PyList_GET_ITEM(arrived, i) == Py_None;
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

PyObject* alive(PyObject*, PyObject*) { return PyLong_FromLongLong(hooks_alive.load()); }

PyMethodDef module_methods[] = {
    {"make", make, METH_VARARGS, "make(completed, quit, producer, full, limits, interval_s, fallback, tick, kinds)"},
    {"walk", walk, METH_VARARGS, "walk(roots) -> (nodes, nexts, producer, root_ids, seqs), or None (a root no C++ node)"},
    {"fetch", fetch, METH_VARARGS, "fetch(normed, wide, small, one_pass) -> window._fetch's floats by name, or None (not plain CPU floats)"},
    {"sketch", sketch, METH_VARARGS, "sketch(t, grid_of) -> (sketch, norm): sketch 3 in one read (sketch.py's buckets_and_norm), or None"},
    {"set_sketch_avx2", set_sketch_avx2, METH_O, "set_sketch_avx2(on) -> has AVX2: sketch with its loop where the CPU has it, or the scalar loop"},
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
