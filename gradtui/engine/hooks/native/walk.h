// Part of posthooks.cpp's one translation unit (included there, inside its anonymous namespace):
// the graph walk of gradtui/engine/capture/graph.py's `_walk`, in C++.

#pragma once

// walk(roots) -> (nodes, nexts, producer, root_ids, seqs), gradtui/engine/capture/graph.py's `_walk` of the
// graph from `roots` (breadth-first, ids in the order found) and each node's sequence number (read
// here for nothing; Python would call into each node for it), or None if a root is no C++ node.
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
  std::vector<uint64_t> seqs;
  // A node found for the first time: its id, with its Python object and what sent to it
  // (borrowed references; null if making them failed) appended.
  auto add = [&](const c10::intrusive_ptr<torch::autograd::Node>& function, PyObject* obj, PyObject* sender) {
    const auto id = static_cast<int64_t>(order.size());
    ids.emplace(function.get(), id);
    order.push_back(function);
    seqs.push_back(function->sequence_nr());
    ok = ok && obj && sender && PyList_Append(nodes, obj) == 0 && PyList_Append(producer, sender) == 0;
    return id;
  };
  for (Py_ssize_t k = 0; ok && k < PyList_GET_SIZE(roots); ++k) {
    PyObject* root = PyList_GET_ITEM(roots, k);
    if (root == Py_None) continue;
    const auto& cdata = cdata_of(root);
    auto found = ids.find(cdata.get());
    const int64_t id = found == ids.end() ? add(cdata, root, Py_None) : found->second;
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
        PyObject* obj = torch::autograd::functionToPyObject(function);
        PyObject* sender = Py_BuildValue("(nn)", static_cast<Py_ssize_t>(here), static_cast<Py_ssize_t>(slot));
        there = add(function, obj, sender);
        Py_XDECREF(obj);
        Py_XDECREF(sender);
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
  PyObject* numbers = ok ? list_of(seqs, PyLong_FromUnsignedLongLong) : nullptr;
  if (!numbers) {
    Py_XDECREF(nodes);
    Py_XDECREF(nexts);
    Py_XDECREF(producer);
    Py_XDECREF(root_ids);
    return nullptr;
  }
  return Py_BuildValue("(NNNNN)", nodes, nexts, producer, root_ids, numbers);
}
