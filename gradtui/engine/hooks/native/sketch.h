// Part of posthooks.cpp's one translation unit (included there, inside its anonymous namespace):
// a fingerprint's sign sketch (gradtui/engine/fingerprints/sketch.py's `buckets_and_norm`) in one
// call, with no Python per op.
//
// The Python sketch of one value is a dozen small torch calls (the signed product, the sum over
// the grid's row blocks, the rest, the pad, the column sum, the fold, the norm), each a trip
// through the Python binding. Here the same calls are made from C++ on the same tensors, in the
// same order, with the same arguments: the same kernels run, so the sketch is the Python one bit
// for bit. The grid (the signs in memory order, the grid's size, the fold) is still made by the
// Python code (`grid_of`: gradtui.engine.fingerprints.sketch.grid_parts), once per shape and dtype,
// and kept here. Anything the Python sketch treats another way (a complex value, one of more than
// CHUNK elements, one not a plain dense CPU tensor) is answered None: Python sketches it.

#pragma once

// Its ATen headers are included by posthooks.cpp, outside the namespace.

struct SketchGrid {
  at::Tensor signs;  // in the value's memory order, (rows, cols)
  int64_t rows = 0, cols = 0;  // the grid's size
  at::Tensor fold;  // (rows * cols, K), one-hot
  at::Tensor ones;  // (1, blocks): a sum over the grid's row blocks as one product (undefined: one block)
};

constexpr int64_t kSketchExact = 64;  // gradtui.engine.fingerprints.sketch.EXACT_LIMIT
constexpr int64_t kSketchChunk = int64_t(1) << 20;  // gradtui.engine.fingerprints.sketch.CHUNK
constexpr size_t kSketchShapes = 512;  // grids kept at most (a new shape past it empties the cache)

constexpr int64_t kSketchKept = int64_t(1) << 25;  // elements kept in grids at most (sketch.py's GRID_CACHE)

std::map<std::tuple<int64_t, int64_t, int>, SketchGrid> sketch_grids;  // (rows, cols, dtype): the GIL guards it
int64_t sketch_kept = 0;  // elements held by the grids kept
thread_local at::Tensor sketch_scratch[2];  // float32, float64: where the signed product is written

// The Python sketch's 2-D form of a shape: (elements / last dimension, last dimension).
std::pair<int64_t, int64_t> sketch_shape2d(at::IntArrayRef shape) {
  if (shape.size() < 2) return {1, shape.empty() ? 1 : shape[0]};
  const int64_t last = shape.back();
  int64_t all = 1;
  for (int64_t d : shape) all *= d;
  return {last ? all / last : 0, last};
}

// `grid_of(rows, cols, dtype)`'s grid for a value held as (rows, cols), kept per shape and dtype.
// False with a Python error set if it could not be made.
bool sketch_grid(PyObject* grid_of, int64_t rows, int64_t cols, at::ScalarType dtype, SketchGrid& out) {
  const auto key = std::make_tuple(rows, cols, static_cast<int>(dtype));
  auto found = sketch_grids.find(key);
  if (found != sketch_grids.end()) {
    out = found->second;
    return true;
  }
  PyObject* made = PyObject_CallFunction(grid_of, "LLi", static_cast<long long>(rows), static_cast<long long>(cols),
                                         dtype == at::kDouble ? 1 : 0);
  if (!made) return false;
  PyObject *signs, *fold;
  long long grid_rows, grid_cols;
  const bool ok = PyArg_ParseTuple(made, "OLLO", &signs, &grid_rows, &grid_cols, &fold) && THPVariable_Check(signs) &&
                  THPVariable_Check(fold) && grid_rows > 0 && grid_cols > 0;
  if (ok) {
    out.signs = THPVariable_Unpack(signs);
    out.rows = grid_rows;
    out.cols = grid_cols;
    out.fold = THPVariable_Unpack(fold);
    const int64_t blocks = rows / grid_rows;
    out.ones = blocks > 1 ? at::ones({1, blocks}, out.signs.options()) : at::Tensor();
    const int64_t size = out.signs.numel() + out.fold.numel();
    if (sketch_grids.size() >= kSketchShapes || sketch_kept + size > kSketchKept) {
      sketch_grids.clear();
      sketch_kept = 0;
    }
    sketch_kept += size;
    sketch_grids.emplace(key, out);
  } else if (!PyErr_Occurred()) {
    PyErr_SetString(PyExc_TypeError, "gradtui: grid_of must return (signs, rows, cols, fold)");
  }
  Py_DECREF(made);
  return ok;
}

// The GIL let go for a scope (given back however the scope ends, an exception included).
struct SketchNoGil {
  PyThreadState* state = PyEval_SaveThread();
  ~SketchNoGil() { PyEval_RestoreThread(state); }
};

// buckets_and_norm's body for a value of at most CHUNK elements: `held` as the Python code holds
// it (its memory as a matrix, or its 2-D form read through its strides), (rows, cols) its 2-D
// shape. The kernels the Python code's calls reach on a plain CPU tensor (at::cpu::, no
// dispatch), in its order, on the same operands: its `ones @ M` is matmul's `mm` of the ones as
// one row, its `pad` an empty buffer filled with zeros and the rest copied in, as pad does.
std::pair<at::Tensor, at::Tensor> sketch_held(const at::Tensor& held, int64_t rows, int64_t cols, const SketchGrid& g,
                                              at::ScalarType dtype) {
  const int64_t count = rows * cols;
  at::Tensor& buffer = sketch_scratch[dtype == at::kDouble ? 1 : 0];
  if (!buffer.defined() || buffer.numel() < count)
    buffer = at::empty({std::max<int64_t>(count, int64_t(1) << 16)}, at::TensorOptions().dtype(dtype));
  at::Tensor flat = buffer.narrow(0, 0, count);
  at::Tensor target = flat.view({rows, cols});
  if (held.dim() == 2) {
    at::cpu::mul_out(target, held, g.signs);
  } else {
    at::Tensor shaped = target.view(held.sizes());
    at::cpu::mul_out(shaped, held, g.signs.view(held.sizes()));
  }
  const int64_t blocks = rows / g.rows, rest = rows % g.rows, whole = blocks * g.rows * cols;
  at::Tensor part;
  if (blocks > 1) {
    part = at::cpu::mm(g.ones, flat.narrow(0, 0, whole).view({blocks, -1})).view(-1);
    if (rest) {
      at::Tensor head = part.narrow(0, 0, rest * cols);
      at::cpu::add_(head, flat.narrow(0, whole, rest * cols));
    }
  } else if (rest) {
    part = flat.narrow(0, 0, g.rows * cols).clone();
    at::Tensor head = part.narrow(0, 0, rest * cols);
    at::cpu::add_(head, flat.narrow(0, g.rows * cols, rest * cols));
  } else {
    part = flat;
  }
  const int64_t padded = (cols + g.cols - 1) / g.cols * g.cols;
  part = part.view({g.rows, cols});
  if (padded > cols) {
    at::Tensor wide = at::empty({g.rows, padded}, part.options());
    wide.fill_(0);
    wide.narrow(1, 0, cols).copy_(part);
    part = wide;
  }
  const at::Tensor columns = at::cpu::sum(part.view({g.rows, padded / g.cols, g.cols}), {1});
  at::Tensor body = at::cpu::mm(columns.view({1, -1}), g.fold).view(-1);
  return {body, at::cpu::linalg_vector_norm(target, 2.0)};
}

// sketch(t, grid_of) -> (sketch, norm) of a plain tensor of more than EXACT_LIMIT elements, as
// gradtui.engine.fingerprints.sketch.buckets_and_norm makes them, or None where that one must.
PyObject* sketch(PyObject*, PyObject* args) {
  HANDLE_TH_ERRORS
  PyObject *value, *grid_of;
  if (!PyArg_ParseTuple(args, "OO", &value, &grid_of)) return nullptr;
  if (!THPVariable_Check(value)) Py_RETURN_NONE;
  const at::Tensor& given = THPVariable_Unpack(value);
  const int64_t numel = given.numel();
  static const c10::DispatchKeySet plain = at::empty({1}, at::kFloat).key_set();
  if (!given.defined() || given.key_set() != plain || given.is_complex() || numel <= kSketchExact ||
      numel > kSketchChunk)
    Py_RETURN_NONE;  // not a plain dense CPU tensor (a view with its sign or conjugate bit, a subclass ...)
  c10::NoGradGuard no_grad;
  const at::Tensor t = given.detach();
  const at::ScalarType dtype = t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  // _memory2d: the matrix its memory holds row-major where it is one, else its 2-D form
  auto [rows, cols] = sketch_shape2d(t.sizes());
  at::Tensor held;
  if (t.dim() == 2 && t.stride(0) == 1 && t.stride(1) == rows && rows > 1 && cols > 1) {
    held = t.t();
  } else if (t.is_contiguous()) {
    held = t.reshape({rows, cols});
  } else {
    held = t.dim() == 2 ? t.view({rows, cols}) : t;
  }
  if (held.dim() == 2) {
    rows = held.size(0);
    cols = held.size(1);
  }
  SketchGrid g;
  if (!sketch_grid(grid_of, rows, cols, dtype, g)) return nullptr;
  std::pair<at::Tensor, at::Tensor> made;
  {
    SketchNoGil no_gil;  // the kernels need no Python: another thread may run meanwhile
    made = sketch_held(held, rows, cols, g, dtype);
  }
  return Py_BuildValue("(NN)", THPVariable_Wrap(made.first), THPVariable_Wrap(made.second));
  END_HANDLE_TH_ERRORS
}
