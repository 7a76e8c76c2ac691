// Part of posthooks.cpp's one translation unit (included by hook.h, inside its anonymous
// namespace): the one call into Python a fingerprinted pass makes per node the hooks measured.
//
// A pass that takes fingerprints (gradtui/engine/fingerprints/values.py) must see every node's
// gradients: where the compiled hooks measure a node (its statistics kept here, as in any pass),
// they hand its gradients to the pass's `visit` (node, sent, arrived), which sketches them
// (the sketch itself in C++: sketch.h). A node the hooks leave to Python is visited by the
// Python posthook instead, so each node is visited once.

#pragma once

void call_visit(Pass& p, int64_t node, const variable_list& sent, const variable_list& arrived) {
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* out = wrap_all(sent);
  PyObject* in = out ? wrap_all(arrived) : nullptr;
  PyObject* res = in ? PyObject_CallFunction(p.visit, "LOO", static_cast<long long>(node), out, in) : nullptr;
  Py_XDECREF(out);
  Py_XDECREF(in);
  if (!res) raise_python_error(gil);
  Py_DECREF(res);
  PyGILState_Release(gil);
}
