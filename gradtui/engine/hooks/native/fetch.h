// Part of posthooks.cpp's one translation unit (included there, inside its anonymous namespace):
// gradtui/engine/stats/window.py's `_fetch`, one host read of many small reductions, in C++.
//
// A pass's end reads its leaves' gradients and the flow's weights: on a 12-layer encoder some 300
// tensors, most of them a few dozen elements, so Python's part (a call per min, max and sum, the
// stacks and the concatenation that gather them for one `.tolist()`) costs more than the kernels.
// Here the same kernels run in one loop with the GIL released, and the numbers come back as the
// one list Python's `_fetch` makes: the same floats (a float32 result widened to a double is what
// `.tolist()` gives after torch's stack promotes it).

#pragma once

// A plain dense CPU float32/float64 tensor (what the window holds) behind `obj`, else null.
const at::Tensor* plain_tensor(PyObject* obj, c10::DispatchKeySet plain) {
  if (!THPVariable_Check(obj)) return nullptr;
  const at::Tensor& t = THPVariable_Unpack(obj);
  if (!t.defined() || t.key_set() != plain) return nullptr;
  const auto type = t.scalar_type();
  return type == at::kFloat || type == at::kDouble ? &t : nullptr;
}

// fetch(normed, wide, small, one_pass) -> [floats], or None where one of the tensors is not a plain
// dense CPU float one (or a kernel refused it): then Python's `_fetch` reads them (and says why).
PyObject* fetch(PyObject*, PyObject* args) {
  PyObject *normed, *wide, *small;
  long long one_pass;
  if (!PyArg_ParseTuple(args, "O!O!O!L", &PyList_Type, &normed, &PyList_Type, &wide, &PyList_Type, &small, &one_pass))
    return nullptr;
  static const c10::DispatchKeySet plain = at::empty({1}, at::kFloat).key_set();
  std::vector<at::Tensor> tensors;
  for (PyObject* list : {normed, wide, small}) {
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(list); ++k) {
      const at::Tensor* t = plain_tensor(PyList_GET_ITEM(list, k), plain);
      if (!t || (list != normed && t->numel() == 0)) Py_RETURN_NONE;
      tensors.push_back(*t);
    }
  }
  const size_t n_normed = PyList_GET_SIZE(normed), n_wide = PyList_GET_SIZE(wide);
  std::vector<double> out;
  bool ok = true;
  Py_BEGIN_ALLOW_THREADS
  try {
    at::AutoDispatchBelowADInplaceOrView below_autograd;  // no graph recorded (create_graph's gradients)
    out.reserve(n_normed + 3 * n_wide);
    for (size_t i = 0; i < n_normed; ++i)
      out.push_back(scalar(at::cpu::linalg_vector_norm(tensors[i], 2, c10::nullopt, false, c10::nullopt)));
    for (size_t i = n_normed; i < n_normed + n_wide; ++i) {
      const at::Tensor& g = tensors[i];
      at::Tensor lo, hi;  // gradtui/engine/stats/summary.py's `extremes`: the same kernels, the same zeros
      if (g.numel() > one_pass || !g.is_contiguous()) {
        lo = at::cpu::amin(g);
        hi = at::cpu::amax(g);
      } else {
        std::tie(lo, hi) = at::cpu::aminmax(g);
      }
      out.push_back(scalar(lo));
      out.push_back(scalar(hi));
      out.push_back(scalar(at::cpu::sum(g, at::IntArrayRef{})));
    }
    for (size_t i = n_normed + n_wide; i < tensors.size(); ++i) {
      const at::Tensor flat = tensors[i].contiguous();
      const int64_t numel = flat.numel();
      if (flat.scalar_type() == at::kDouble) {
        const double* data = flat.const_data_ptr<double>();
        out.insert(out.end(), data, data + numel);
      } else {
        const float* data = flat.const_data_ptr<float>();
        for (int64_t e = 0; e < numel; ++e) out.push_back(static_cast<double>(data[e]));
      }
    }
  } catch (const std::exception&) {
    ok = false;
  }
  Py_END_ALLOW_THREADS
  if (!ok) Py_RETURN_NONE;
  return list_of(out, PyFloat_FromDouble);
}
