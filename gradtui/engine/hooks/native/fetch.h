// Part of posthooks.cpp's one translation unit (included there, inside its anonymous namespace):
// gradtui/engine/stats/window.py's `_fetch`, one host read of many small reductions, in C++.
//
// A pass's end reads its leaves' gradients and the flow's weights: on a 12-layer encoder some 300
// tensors, most of them a few dozen elements, so Python's part (a call per min, max and sum, the
// stacks and the concatenation that gather them for one `.tolist()`) costs more than the kernels.
// Here the same kernels run in one loop with the GIL released (a wide tensor's measured by records.h's
// `measure_wide`, as a posthook's big gradient is: its min and max in extremes.h's one pass, equal to
// torch's), and the numbers come back by name, as the dict
// Python's `_fetch` makes: the same floats (a float32 result widened to a double is what `.tolist()`
// gives after torch's stack promotes it).

#pragma once

// A plain dense CPU float32/float64 tensor (what the window holds) behind `obj`, else null.
const at::Tensor* plain_tensor(PyObject* obj, c10::DispatchKeySet plain) {
  if (!THPVariable_Check(obj)) return nullptr;
  const at::Tensor& t = THPVariable_Unpack(obj);
  if (!t.defined() || t.key_set() != plain) return nullptr;
  const auto type = t.scalar_type();
  return type == at::kFloat || type == at::kDouble ? &t : nullptr;
}

// The bulk fetch's answer, read by Python by field name: the norms of `normed` under "norm", each
// other statistic of `MEASURED` (records.h) of every `wide` tensor under its Stats field's name
// ("min", "max", "mean": `measure_wide` fills a GradRec of each), and every element of `small`, in
// order, under "values".
struct Fetched {
  std::vector<double> norms;
  std::vector<GradRec> wide;
  std::vector<double> values;
};

// Fetched as the dict window.py's `_fetch` returns: a list of floats per name; null on an error.
PyObject* fetched_dict(const Fetched& f) {
  PyObject* out = PyDict_New();
  auto put = [&](const char* name, PyObject* list) {
    if (out && (!list || PyDict_SetItemString(out, name, list) < 0)) Py_CLEAR(out);
    Py_XDECREF(list);
  };
  put("norm", list_of(f.norms, PyFloat_FromDouble));
  for (size_t k = 0; out && k < MEASURED_N; ++k) {
    if (MEASURED[k].member == &GradRec::norm) continue;  // "norm" is the fused norms' list
    const auto member = MEASURED[k].member;
    put(MEASURED[k].name, list_of(f.wide, [member](const GradRec& r) { return PyFloat_FromDouble(r.*member); }));
  }
  put("values", list_of(f.values, PyFloat_FromDouble));
  return out;
}

// fetch(normed, wide, small, one_pass) -> Fetched's dict, or None where one of the tensors is not a
// plain dense CPU float one (or a kernel refused it): then Python's `_fetch` reads them (and says why).
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
  Fetched out;
  bool ok = true;
  Py_BEGIN_ALLOW_THREADS
  try {
    at::AutoDispatchBelowADInplaceOrView below_autograd;  // no graph recorded (create_graph's gradients)
    out.norms.reserve(n_normed);
    out.wide.resize(n_wide);
    for (size_t i = 0; i < n_normed; ++i)
      out.norms.push_back(scalar(at::cpu::linalg_vector_norm(tensors[i], 2, c10::nullopt, false, c10::nullopt)));
    for (size_t i = 0; i < n_wide; ++i) measure_wide(tensors[n_normed + i], one_pass, out.wide[i]);
    for (size_t i = n_normed + n_wide; i < tensors.size(); ++i) {
      const at::Tensor flat = tensors[i].contiguous();
      const int64_t numel = flat.numel();
      if (flat.scalar_type() == at::kDouble) {
        const double* data = flat.const_data_ptr<double>();
        out.values.insert(out.values.end(), data, data + numel);
      } else {
        const float* data = flat.const_data_ptr<float>();
        for (int64_t e = 0; e < numel; ++e) out.values.push_back(static_cast<double>(data[e]));
      }
    }
  } catch (const std::exception&) {
    ok = false;
  }
  Py_END_ALLOW_THREADS
  if (!ok) Py_RETURN_NONE;
  return fetched_dict(out);
}
