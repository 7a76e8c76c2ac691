// Part of posthooks.cpp's one translation unit (included there, inside its anonymous namespace):
// a fingerprint's sign sketch, version 3 (gradtui/engine/fingerprints/sketch.py), in one read of
// the value.
//
// Sketch 3 is sketch 2's linear map: the same signs, the same (row mod grid rows, column mod grid
// columns) cells, the same fold of the cells into the K entries. What it fixes is the arithmetic:
// each element is taken as float32 (float64 for a float64 value), times its sign (exact), and
// every sum (cells, entries, the squares of the norm) runs in float64; the entries and the norm
// are rounded to the value's sketch dtype at the end. The float64 sums of two orders differ by
// about 1e-16 relative, far below float32's rounding, so this one-read kernel, its scalar twin
// and the Python code (several torch calls, another order) give the same float32 numbers, a last
// bit apart at the rarest rounding tie; a float64 value's agree to float64 rounding.
//
// The kernel reads the value once: each row times its signs is added into the float64 row of the
// grid row it falls in while its squares are summed, in AVX2 lanes where the CPU has them (a
// scalar loop otherwise, with the same lanes: the same bits); then the small (grid rows, columns)
// rest is summed into its cells and the cells into the entries. A view whose rows are runs (heads
// split off the last dimension, a slice of rows, a broadcast) is read in place, each row from its
// start; one read through other strides is first copied in its 2-D form's order; a value neither
// float32 nor float64 (a half, an integer, a mask) is first made float32, as the Python code's
// product with float32 signs makes it. Complex values, ones of more than CHUNK elements
// and anything not a plain dense CPU tensor are answered None: the Python code sketches them.
//
// The grid (the signs in memory order, the grid's size, the fold) is made by the Python code
// (`grid_of`: gradtui.engine.fingerprints.sketch.grid_parts) once per shape and dtype, and kept.

#pragma once

// Its ATen headers are included by posthooks.cpp, outside the namespace.

constexpr int kSketchK = 8;  // gradtui.engine.fingerprints.sketch.K
constexpr int64_t kSketchExact = 64;  // gradtui.engine.fingerprints.sketch.EXACT_LIMIT
constexpr int64_t kSketchChunk = int64_t(1) << 20;  // gradtui.engine.fingerprints.sketch.CHUNK
constexpr size_t kSketchShapes = 512;  // grids kept at most (a new shape past it empties the cache)
constexpr int64_t kSketchKept = int64_t(1) << 25;  // elements kept in grids at most (sketch.py's GRID_CACHE)

struct SketchGrid {
  at::Tensor signs;  // in the value's memory order, (rows, cols), contiguous
  int64_t rows = 0, cols = 0;  // the grid's size
  std::vector<int8_t> entry;  // the K entry of each of its rows * cols cells, row-major
};

// (rows, cols, dtype): the GIL guards the map; a sketch holds its grid while the GIL is let go
std::map<std::tuple<int64_t, int64_t, int>, std::shared_ptr<const SketchGrid>> sketch_grids;
int64_t sketch_kept = 0;  // elements held by the grids kept

// The Python sketch's 2-D form of a shape: (elements / last dimension, last dimension).
std::pair<int64_t, int64_t> sketch_shape2d(at::IntArrayRef shape) {
  if (shape.size() < 2) return {1, shape.empty() ? 1 : shape[0]};
  const int64_t last = shape.back();
  int64_t all = 1;
  for (int64_t d : shape) all *= d;
  return {last ? all / last : 0, last};
}

// `grid_of(rows, cols, dtype)`'s grid for a value held as (rows, cols), kept per shape and dtype.
// Null with a Python error set if it could not be made.
std::shared_ptr<const SketchGrid> sketch_grid(PyObject* grid_of, int64_t rows, int64_t cols, at::ScalarType dtype) {
  const auto key = std::make_tuple(rows, cols, static_cast<int>(dtype));
  auto found = sketch_grids.find(key);
  if (found != sketch_grids.end()) return found->second;
  SketchGrid out;
  std::shared_ptr<const SketchGrid> kept;
  PyObject* made = PyObject_CallFunction(grid_of, "LLi", static_cast<long long>(rows), static_cast<long long>(cols),
                                         dtype == at::kDouble ? 1 : 0);
  if (!made) return nullptr;
  PyObject *signs, *fold;
  long long grid_rows, grid_cols;
  bool ok = PyArg_ParseTuple(made, "OLLO", &signs, &grid_rows, &grid_cols, &fold) && THPVariable_Check(signs) &&
            THPVariable_Check(fold) && grid_rows > 0 && grid_cols > 0;
  if (ok) {
    const at::Tensor s = THPVariable_Unpack(signs), f = THPVariable_Unpack(fold);
    ok = s.dim() == 2 && s.size(0) == rows && s.size(1) == cols && s.scalar_type() == dtype && s.is_cpu() &&
         f.dim() == 2 && f.size(0) == grid_rows * grid_cols && f.size(1) == kSketchK;
    if (ok) {
      out.signs = s.contiguous();
      out.rows = grid_rows;
      out.cols = grid_cols;
      const at::Tensor fold64 = f.to(at::kDouble).contiguous();
      const double* pf = fold64.const_data_ptr<double>();
      out.entry.assign(static_cast<size_t>(grid_rows * grid_cols), 0);
      for (int64_t c = 0; c < grid_rows * grid_cols; ++c)
        for (int k = 0; k < kSketchK; ++k)
          if (pf[c * kSketchK + k] != 0.0) out.entry[c] = static_cast<int8_t>(k);
      const int64_t size = out.signs.numel() + f.numel();
      if (sketch_grids.size() >= kSketchShapes || sketch_kept + size > kSketchKept) {
        sketch_grids.clear();
        sketch_kept = 0;
      }
      sketch_kept += size;
      kept = std::make_shared<const SketchGrid>(std::move(out));
      sketch_grids.emplace(key, kept);
    } else {
      PyErr_SetString(PyExc_ValueError, "gradtui: grid_of's signs or fold are not of the value's shape");
    }
  } else if (!PyErr_Occurred()) {
    PyErr_SetString(PyExc_TypeError, "gradtui: grid_of must return (signs, rows, cols, fold)");
  }
  Py_DECREF(made);
  return kept;
}

// The GIL let go for a scope (given back however the scope ends, an exception included).
struct SketchNoGil {
  PyThreadState* state = PyEval_SaveThread();
  ~SketchNoGil() { PyEval_RestoreThread(state); }
};

// Each row of a float32 (rows, cols) matrix (row i at px + at[i], or px + i * cols where `at` is
// null; its columns one after another) times its signs, added in float64 into row (i mod gr) of
// `buf` (gr, cols); the squares summed in kLanes lanes (lane j mod kLanes of a row's first
// cols - cols mod kLanes columns: four independent AVX2 sums, so no one sum's latency paces the
// loop) and the rest of each row in `tail`. A float32 times a sign is exact and so is its square
// in float64, so the order below is the whole of the arithmetic: the AVX2 loop and this scalar
// one give the same bits.
constexpr int64_t kLanes = 16;

void rows_float_scalar(const float* px, const float* ps, const int64_t* at, int64_t rows, int64_t cols, int64_t gr,
                       double* buf, double* lanes, double& tail) {
  const int64_t body = cols - cols % kLanes;
  for (int64_t i = 0, r = 0; i < rows; ++i, r = r + 1 == gr ? 0 : r + 1) {  // r: i mod gr
    double* b = buf + r * cols;
    const float* rx = px + (at ? at[i] : i * cols);
    const float* rs = ps + i * cols;
    for (int64_t j = 0; j < body; ++j) {
      const double v = static_cast<double>(rx[j] * rs[j]);
      b[j] += v;
      lanes[j % kLanes] += v * v;
    }
    for (int64_t j = body; j < cols; ++j) {
      const double v = static_cast<double>(rx[j] * rs[j]);
      b[j] += v;
      tail += v * v;
    }
  }
}

// The same for a float64 matrix, in kLanes / 2 lanes (a square rounded on its own, then added).
void rows_double_scalar(const double* px, const double* ps, const int64_t* at, int64_t rows, int64_t cols, int64_t gr,
                        double* buf, double* lanes, double& tail) {
  const int64_t body = cols - cols % (kLanes / 2);
  for (int64_t i = 0, r = 0; i < rows; ++i, r = r + 1 == gr ? 0 : r + 1) {  // r: i mod gr
    double* b = buf + r * cols;
    const double* rx = px + (at ? at[i] : i * cols);
    const double* rs = ps + i * cols;
    for (int64_t j = 0; j < body; ++j) {
      const double v = rx[j] * rs[j];
      b[j] += v;
      const double square = v * v;  // rounded on its own, as the AVX2 loop's product is
      lanes[j % (kLanes / 2)] += square;
    }
    for (int64_t j = body; j < cols; ++j) {
      const double v = rx[j] * rs[j];
      b[j] += v;
      const double square = v * v;
      tail += square;
    }
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define GRADTUI_SKETCH_AVX2 1

// One step of 8 floats at column j of a row: widened to two 4-double halves, added into the
// buffer row, their squares into two of the lanes' sums.
__attribute__((target("avx2"))) inline void step_float(const float* rx, const float* rs, double* b, int64_t j,
                                                      __m256d& low, __m256d& high) {
  const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(rx + j), _mm256_loadu_ps(rs + j));
  const __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
  const __m256d c = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
  _mm256_storeu_pd(b + j, _mm256_add_pd(_mm256_loadu_pd(b + j), a));
  _mm256_storeu_pd(b + j + 4, _mm256_add_pd(_mm256_loadu_pd(b + j + 4), c));
  low = _mm256_add_pd(low, _mm256_mul_pd(a, a));
  high = _mm256_add_pd(high, _mm256_mul_pd(c, c));
}

// rows_float_scalar in AVX2 registers (16 floats a step).
__attribute__((target("avx2"))) void rows_float_avx2(const float* px, const float* ps, const int64_t* at,
                                                     int64_t rows, int64_t cols, int64_t gr, double* buf,
                                                     double* lanes, double& tail) {
  __m256d s0 = _mm256_loadu_pd(lanes), s1 = _mm256_loadu_pd(lanes + 4);
  __m256d s2 = _mm256_loadu_pd(lanes + 8), s3 = _mm256_loadu_pd(lanes + 12);
  const int64_t body = cols - cols % kLanes;
  double rest = tail;
  for (int64_t i = 0, r = 0; i < rows; ++i, r = r + 1 == gr ? 0 : r + 1) {  // r: i mod gr
    double* b = buf + r * cols;
    const float* rx = px + (at ? at[i] : i * cols);
    const float* rs = ps + i * cols;
    for (int64_t j = 0; j < body; j += kLanes) {
      step_float(rx, rs, b, j, s0, s1);
      step_float(rx, rs, b, j + 8, s2, s3);
    }
    for (int64_t j = body; j < cols; ++j) {
      const double v = static_cast<double>(rx[j] * rs[j]);
      b[j] += v;
      rest += v * v;
    }
  }
  _mm256_storeu_pd(lanes, s0);
  _mm256_storeu_pd(lanes + 4, s1);
  _mm256_storeu_pd(lanes + 8, s2);
  _mm256_storeu_pd(lanes + 12, s3);
  tail = rest;
}

// rows_double_scalar in AVX2 registers (8 doubles a step).
__attribute__((target("avx2"))) void rows_double_avx2(const double* px, const double* ps, const int64_t* at,
                                                      int64_t rows, int64_t cols, int64_t gr, double* buf,
                                                      double* lanes, double& tail) {
  __m256d s0 = _mm256_loadu_pd(lanes), s1 = _mm256_loadu_pd(lanes + 4);
  const int64_t body = cols - cols % (kLanes / 2);
  double rest = tail;
  for (int64_t i = 0, r = 0; i < rows; ++i, r = r + 1 == gr ? 0 : r + 1) {  // r: i mod gr
    double* b = buf + r * cols;
    const double* rx = px + (at ? at[i] : i * cols);
    const double* rs = ps + i * cols;
    for (int64_t j = 0; j < body; j += kLanes / 2) {
      const __m256d v = _mm256_mul_pd(_mm256_loadu_pd(rx + j), _mm256_loadu_pd(rs + j));
      const __m256d w = _mm256_mul_pd(_mm256_loadu_pd(rx + j + 4), _mm256_loadu_pd(rs + j + 4));
      _mm256_storeu_pd(b + j, _mm256_add_pd(_mm256_loadu_pd(b + j), v));
      _mm256_storeu_pd(b + j + 4, _mm256_add_pd(_mm256_loadu_pd(b + j + 4), w));
      s0 = _mm256_add_pd(s0, _mm256_mul_pd(v, v));
      s1 = _mm256_add_pd(s1, _mm256_mul_pd(w, w));
    }
    for (int64_t j = body; j < cols; ++j) {
      const double v = rx[j] * rs[j];
      b[j] += v;
      const double square = v * v;
      rest += square;
    }
  }
  _mm256_storeu_pd(lanes, s0);
  _mm256_storeu_pd(lanes + 4, s1);
  tail = rest;
}
#endif

bool sketch_avx2_off = false;  // set_sketch_avx2(False): the scalar loop (the tests compare the two)

// Sketch 3 of a (rows, cols) float32 or float64 matrix at `data` (`dbl`: float64), row i at
// element at[i] (i * cols where `at` is null), its columns one after another, whose signs are
// `g.signs`: its K entries and its norm, each summed in float64.
void sketch_one_read(const void* data, bool dbl, const int64_t* at, int64_t rows, int64_t cols, const SketchGrid& g,
                     double* entries, double& norm) {
  const int64_t gr = g.rows, gc = g.cols;
  thread_local std::vector<double> buf, cells;
  buf.assign(static_cast<size_t>(gr * cols), 0.0);
  double lanes[kLanes] = {};
  double tail = 0.0;
#ifdef GRADTUI_SKETCH_AVX2
  const bool wide = !sketch_avx2_off && has_avx2();
#else
  const bool wide = false;
#endif
  if (dbl) {
    const double *px = static_cast<const double*>(data), *ps = g.signs.const_data_ptr<double>();
#ifdef GRADTUI_SKETCH_AVX2
    if (wide) rows_double_avx2(px, ps, at, rows, cols, gr, buf.data(), lanes, tail);
#endif
    if (!wide) rows_double_scalar(px, ps, at, rows, cols, gr, buf.data(), lanes, tail);
  } else {
    const float *px = static_cast<const float*>(data), *ps = g.signs.const_data_ptr<float>();
#ifdef GRADTUI_SKETCH_AVX2
    if (wide) rows_float_avx2(px, ps, at, rows, cols, gr, buf.data(), lanes, tail);
#endif
    if (!wide) rows_float_scalar(px, ps, at, rows, cols, gr, buf.data(), lanes, tail);
  }
  // the grid rows' columns into their cells (column mod gc), in column order
  cells.assign(static_cast<size_t>(gr * gc), 0.0);
  for (int64_t r = 0; r < gr; ++r) {
    const double* br = buf.data() + r * cols;
    double* cr = cells.data() + r * gc;
    for (int64_t from = 0; from < cols; from += gc) {
      const int64_t n = std::min(gc, cols - from);
      for (int64_t c = 0; c < n; ++c) cr[c] += br[from + c];
    }
  }
  for (int k = 0; k < kSketchK; ++k) entries[k] = 0.0;
  for (int64_t c = 0; c < gr * gc; ++c) entries[g.entry[c]] += cells[c];
  double squares = 0.0;
  for (double lane : lanes) squares += lane;
  norm = std::sqrt(squares + tail);
}

// sketch(t, grid_of) -> (sketch, norm) of a plain tensor of more than EXACT_LIMIT elements, sketch
// 3 as gradtui.engine.fingerprints.sketch.buckets_and_norm defines it, or None where that one must.
PyObject* sketch(PyObject*, PyObject* args) {
  HANDLE_TH_ERRORS
  PyObject *value, *grid_of;
  if (!PyArg_ParseTuple(args, "OO", &value, &grid_of)) return nullptr;
  if (!THPVariable_Check(value)) Py_RETURN_NONE;
  const at::Tensor& given = THPVariable_Unpack(value);
  static const c10::DispatchKeySet plain = at::empty({1}, at::kFloat).key_set();
  if (!given.defined() || given.key_set() != plain || given.is_complex() || given.numel() <= kSketchExact ||
      given.numel() > kSketchChunk)
    Py_RETURN_NONE;  // not a plain dense CPU tensor (a view with its sign or conjugate bit, a subclass ...)
  const at::Tensor& t = given;  // only read: neither detached nor recorded
  const at::ScalarType dtype = t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  // _memory2d: the matrix its memory holds row-major where it is one, else its 2-D form
  auto [rows, cols] = sketch_shape2d(t.sizes());
  const bool flipped = t.dim() == 2 && t.stride(0) == 1 && t.stride(1) == rows && rows > 1 && cols > 1;
  if (flipped) std::swap(rows, cols);
  const std::shared_ptr<const SketchGrid> grid = sketch_grid(grid_of, rows, cols, dtype);
  if (!grid) return nullptr;
  const SketchGrid& g = *grid;
  double entries[kSketchK], norm = 0.0;
  {
    SketchNoGil no_gil;  // no Python below: another thread may run meanwhile
    const bool rowwise = flipped || t.is_contiguous() || (t.dim() > 0 && t.stride(-1) == 1);
    if (rowwise && t.scalar_type() == dtype) {
      std::vector<int64_t> starts;  // where each row of its 2-D form starts, in elements (none: i * cols)
      if (!flipped && !t.is_contiguous()) {  // a strided view whose rows are runs (heads split)
        starts.resize(static_cast<size_t>(rows));
        const int64_t dims = t.dim() - 1;  // the leading dimensions, counted through like an odometer
        const at::IntArrayRef sizes = t.sizes(), strides = t.strides();
        std::vector<int64_t> index(static_cast<size_t>(dims), 0);
        int64_t offset = 0;
        for (int64_t i = 0; i < rows; ++i) {
          starts[i] = offset;
          for (int64_t d = dims - 1; d >= 0; --d) {
            if (++index[d] < sizes[d]) {
              offset += strides[d];
              break;
            }
            offset -= (sizes[d] - 1) * strides[d];
            index[d] = 0;
          }
        }
      }
      sketch_one_read(t.const_data_ptr(), dtype == at::kDouble, starts.empty() ? nullptr : starts.data(), rows, cols, g,
                      entries, norm);
    } else {  // read through other strides: copied in its 2-D form's order; a half, an integer, a mask made float32
      c10::NoGradGuard no_grad;
      at::Tensor held = (flipped ? t.t() : t.reshape({rows, cols})).to(dtype).contiguous();
      sketch_one_read(held.const_data_ptr(), dtype == at::kDouble, nullptr, rows, cols, g, entries, norm);
    }
  }
  at::Tensor body = at::empty({kSketchK}, at::TensorOptions().dtype(dtype));
  at::Tensor length = at::empty({}, at::TensorOptions().dtype(dtype));
  if (dtype == at::kDouble) {
    std::copy(entries, entries + kSketchK, body.data_ptr<double>());
    *length.data_ptr<double>() = norm;
  } else {
    float* pb = body.data_ptr<float>();
    for (int k = 0; k < kSketchK; ++k) pb[k] = static_cast<float>(entries[k]);
    *length.data_ptr<float>() = static_cast<float>(norm);
  }
  std::pair<at::Tensor, at::Tensor> made{body, length};
  return Py_BuildValue("(NN)", THPVariable_Wrap(made.first), THPVariable_Wrap(made.second));
  END_HANDLE_TH_ERRORS
}

// set_sketch_avx2(on): sketch with the AVX2 loop where the CPU has it (the default) or the scalar
// loop alone (off): the tests check that the two give the same bits.
PyObject* set_sketch_avx2(PyObject*, PyObject* arg) {
  sketch_avx2_off = !PyObject_IsTrue(arg);
#ifdef GRADTUI_SKETCH_AVX2
  return PyBool_FromLong(has_avx2());
#else
  Py_RETURN_FALSE;
#endif
}
