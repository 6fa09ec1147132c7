// StepRequest and StepOutput: the typed input and output of ModelRunner.step (step_types.h).
// A field of the wrong type is a TypeError, a value out of range a ValueError; both read
// "StepRequest.<field> = <value>: <what is allowed>".
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <climits>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "step_types.h"

namespace py = pybind11;

namespace specdec::bindings {
namespace {

using runner::StepRequest;

std::string type_name(py::handle value) {
  return py::type::of(value).attr("__name__").cast<std::string>();
}

// repr(value), at most 80 bytes, or its type when repr fails.
std::string short_repr(py::handle value) {
  try {
    return clip_for_message(py::repr(value).cast<std::string>(), 80);
  } catch (const py::error_already_set&) {
    return str_cat("<a ", type_name(value), " that cannot be shown>");
  }
}

[[noreturn]] void type_error(const std::string& field, py::handle value,
                             const std::string& allowed) {
  throw py::type_error(
      str_cat(field, " = ", short_repr(value), ": ", allowed, " (got ", type_name(value), ")"));
}

// An int or an integer-like object (a NumPy integer), not a bool: TypeError for anything else,
// ValueError outside [lo, hi].
int64_t integer(py::handle value, const std::string& field, int64_t lo, int64_t hi,
                const std::string& allowed) {
  if (PyBool_Check(value.ptr()) || !PyIndex_Check(value.ptr())) type_error(field, value, allowed);
  const auto index = py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr()));
  if (!index) {
    PyErr_Clear();
    type_error(field, value, allowed);
  }
  int overflow = 0;
  const long long x = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow != 0 || x < lo || x > hi) throw ConfigError(field, short_repr(value), allowed);
  return x;
}

void set_request_id(StepRequest& r, py::handle value) {
  if (!PyUnicode_Check(value.ptr())) type_error("StepRequest.request_id", value, "a str");
  r.request_id = value.cast<std::string>();
}

void set_tokens(StepRequest& r, py::handle value) {
  const std::string field = "StepRequest.tokens";
  const std::string allowed = "a sequence of token ids (a list, tuple, range or 1-D integer array)";
  if (PyUnicode_Check(value.ptr()) || PyBytes_Check(value.ptr()) ||
      PyByteArray_Check(value.ptr()) || !PySequence_Check(value.ptr()) ||
      (py::isinstance<py::array>(value) && py::reinterpret_borrow<py::array>(value).ndim() != 1)) {
    type_error(field, value, allowed);
  }
  const auto seq = py::reinterpret_steal<py::object>(PySequence_Fast(value.ptr(), "tokens"));
  if (!seq) throw py::error_already_set();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
  std::vector<int32_t> tokens(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    tokens[i] = static_cast<int32_t>(integer(PySequence_Fast_GET_ITEM(seq.ptr(), i),
                                             str_cat(field, "[", i, "]"), 0, INT32_MAX,
                                             "a token id: an int in [0, 2**31)"));
  }
  r.tokens = std::move(tokens);
}

void set_num_computed_tokens(StepRequest& r, py::handle value) {
  r.num_computed_tokens = integer(value, "StepRequest.num_computed_tokens", 0, INT64_MAX,
                                  "an int >= 0 (the request's tokens already in the cache)");
}

void set_num_logits(StepRequest& r, py::handle value) {
  r.num_logits = static_cast<int>(integer(value, "StepRequest.num_logits", 0, INT32_MAX,
                                          "an int in [0, number of new tokens] (logit rows for the "
                                          "last num_logits new tokens)"));
}

void set_num_committed_tokens(StepRequest& r, py::handle value) {
  r.num_committed_tokens = integer(value, "StepRequest.num_committed_tokens", -1, INT64_MAX,
                                   "an int >= -1 (tokens that can no longer be rolled back; -1: "
                                   "every computed token)");
}

std::string request_repr(const StepRequest& r) {
  const size_t n = r.tokens.size();
  const size_t shown = n <= 16 ? n : 8;
  std::string tokens = "[";
  for (size_t i = 0; i < shown; ++i) tokens += str_cat(i == 0 ? "" : ", ", r.tokens[i]);
  tokens += shown < n ? str_cat(", ...] (", n, " tokens)") : "]";
  const std::string id = clip_for_message(py::repr(py::str(r.request_id)).cast<std::string>(), 80);
  return str_cat("StepRequest(request_id=", id, ", tokens=", tokens,
                 ", num_computed_tokens=", r.num_computed_tokens, ", num_logits=", r.num_logits,
                 ", num_committed_tokens=", r.num_committed_tokens, ")");
}

bool same_request(const StepRequest& a, const StepRequest& b) {
  return a.request_id == b.request_id && a.tokens == b.tokens &&
         a.num_computed_tokens == b.num_computed_tokens && a.num_logits == b.num_logits &&
         a.num_committed_tokens == b.num_committed_tokens;
}

// A NumPy array that owns `values` (moved, not copied; freed with the array).
template <typename T>
py::array_t<T> owning_array(std::vector<T>&& values, const std::vector<py::ssize_t>& shape) {
  auto owner = std::make_unique<std::vector<T>>(std::move(values));
  const T* data = owner->data();
  const py::capsule base(owner.get(), [](void* p) { delete static_cast<std::vector<T>*>(p); });
  owner.release();  // the capsule frees it now
  return py::array_t<T>(shape, data, base);
}

// The array in `slot`, made from `values` on the first call.
template <typename T>
py::object array_once(py::object& slot, std::vector<T>& values, const std::vector<py::ssize_t>& shape) {
  if (!slot) slot = owning_array(std::move(values), shape);
  return slot;
}

void bind_step_request(py::module_& m) {
  py::class_<StepRequest> cls(
      m, "StepRequest",
      "One request's share of a ModelRunner.step: `tokens` are its new tokens, at "
      "positions num_computed_tokens, num_computed_tokens + 1, ...; logits come for the "
      "last num_logits of them (0: none; a prefill chunk 1 or 0, a k+1 verify k+1). "
      "num_committed_tokens: tokens that can no longer be rolled back (-1: every "
      "computed one). TypeError or ValueError naming the field for a bad value.");
  cls.def(py::init([](py::handle request_id, py::handle tokens, py::handle num_computed_tokens,
                      py::handle num_logits, py::handle num_committed_tokens) {
            StepRequest r;
            set_request_id(r, request_id);
            set_tokens(r, tokens);
            set_num_computed_tokens(r, num_computed_tokens);
            set_num_logits(r, num_logits);
            set_num_committed_tokens(r, num_committed_tokens);
            return r;
          }),
          py::arg("request_id"), py::arg("tokens"), py::kw_only(),
          py::arg("num_computed_tokens") = 0, py::arg("num_logits") = 1,
          py::arg("num_committed_tokens") = -1,
          "StepRequest(request_id, tokens, *, num_computed_tokens=0, num_logits=1, "
          "num_committed_tokens=-1)")
      .def(py::init([](py::handle, py::handle, const py::args& counts,
                       const py::kwargs& kw) -> StepRequest {
             if (counts.size() > 0) {
               throw py::type_error(
                   str_cat("StepRequest: ", counts.size(),
                           " positional count(s) after tokens: "
                           "num_computed_tokens, num_logits and num_committed_tokens are "
                           "keyword arguments (StepRequest(request_id, tokens, "
                           "num_computed_tokens=..., num_logits=...))"));
             }
             std::string names;
             for (const auto item : kw) {
               const std::string key = py::str(item.first);
               if (key == "request_id" || key == "tokens" || key == "num_computed_tokens" ||
                   key == "num_logits" || key == "num_committed_tokens")
                 continue;  // a known field beside an unknown one
               names += str_cat(names.empty() ? "" : ", ", short_repr(item.first));
             }
             throw py::type_error(
                 str_cat("StepRequest: unknown keyword argument(s) ", names,
                         ": the fields are request_id, tokens, num_computed_tokens, num_logits "
                         "and num_committed_tokens"));
           }),
           "(refuses positional counts and unknown keywords with a TypeError saying what to write)")
      .def_property(
          "request_id", [](const StepRequest& r) { return r.request_id; }, &set_request_id)
      .def_property(
          "tokens", [](const StepRequest& r) { return r.tokens; }, &set_tokens,
          "The new tokens (a copy: assign a new sequence to change them).")
      .def_property(
          "num_computed_tokens", [](const StepRequest& r) { return r.num_computed_tokens; },
          &set_num_computed_tokens)
      .def_property(
          "num_logits", [](const StepRequest& r) { return r.num_logits; }, &set_num_logits)
      .def_property(
          "num_committed_tokens", [](const StepRequest& r) { return r.num_committed_tokens; },
          &set_num_committed_tokens)
      .def("__repr__", &request_repr)
      .def("__eq__", [](const StepRequest& a, py::handle b) -> py::object {
        if (!py::isinstance<StepRequest>(b))
          return py::reinterpret_borrow<py::object>(Py_NotImplemented);
        return py::bool_(same_request(a, b.cast<const StepRequest&>()));
      });
  cls.attr("__hash__") = py::none();  // mutable
}

void bind_step_output(py::module_& m) {
  py::class_<StepResult>(
      m, "StepOutput",
      "What one ModelRunner.step returns (read-only): logits float32 [rows, vocab_size] "
      "(0 rows with return_logits=False), logits_start (request i's rows are "
      "logits_start[i]:logits_start[i + 1]; the last entry is the total), argmax int32 "
      "[rows] (ties: the lowest id) and argmax_logprob float32 [rows], both reduced on the "
      "device, hidden {layer: float32 [tokens, hidden_size]}.")
      .def_property_readonly(
          "logits",
          [](StepResult& r) {
            return array_once(r.logits, r.out.logits, {r.logit_rows, r.out.vocab_size});
          },
          "float32 [rows, vocab_size]; 0 rows with return_logits=False.")
      .def_property_readonly(
          "logits_start", [](const StepResult& r) { return r.out.logits_start; },
          "[num_requests + 1]: the first row of each request, then the total.")
      .def_property_readonly(
          "argmax", [](StepResult& r) { return array_once(r.argmax, r.out.argmax, {r.num_rows}); },
          "int32 [rows]: the token with the largest logit (ties: the lowest id).")
      .def_property_readonly(
          "argmax_logprob",
          [](StepResult& r) { return array_once(r.argmax_logprob, r.out.argmax_logprob, {r.num_rows}); },
          "float32 [rows]: its log-probability.")
      .def_property_readonly(
          "hidden",
          [](StepResult& r) {
            if (!r.hidden) {
              py::dict d;
              for (auto& [layer, h] : r.out.hidden) {
                const auto tokens = static_cast<py::ssize_t>(h.size()) / r.hidden_size;
                d[py::int_(layer)] = owning_array(std::move(h), {tokens, r.hidden_size});
              }
              r.hidden = d;
            }
            return py::reinterpret_steal<py::dict>(PyDict_Copy(r.hidden.ptr()));
          },
          "{layer: float32 [tokens, hidden_size]}: the residual stream after the layers asked for "
          "(-1: after the final norm).")
      .def_property_readonly(
          "vocab_size", [](const StepResult& r) { return r.out.vocab_size; },
                    "The width of a logits row (see logit_token_ids).")
      .def_property_readonly(
          "num_requests",
          [](const StepResult& r) { return static_cast<int64_t>(r.out.logits_start.size()) - 1; })
      .def_property_readonly(
          "num_rows", [](const StepResult& r) { return r.out.logits_start.back(); },
          "Logit rows of the step (argmax has this many; logits too unless return_logits=False).")
      .def(
          "rows",
          [](const StepResult& r, int64_t i) {
            const std::vector<int64_t>& starts = r.out.logits_start;
            const int64_t n = static_cast<int64_t>(starts.size()) - 1;
            if (i < -n || i >= n)
              throw py::index_error(str_cat("request index ", i, ": in [-", n, ", ", n,
                                            ") for a step of ", n, " requests"));
            if (i < 0) i += n;
            return py::reinterpret_steal<py::slice>(PySlice_New(
                py::int_(starts[i]).ptr(), py::int_(starts[i + 1]).ptr(), nullptr));
          },
          py::arg("i"),
          "Request i's rows as a slice: out.logits[out.rows(i)], out.argmax[out.rows(i)].")
      .def("__repr__", [](const StepResult& r) {
        std::string layers;
        for (const auto& item : r.out.hidden) layers += str_cat(layers.empty() ? "" : ", ", item.first);
        return str_cat("StepOutput(num_requests=", r.out.logits_start.size() - 1,
                       ", num_rows=", r.out.logits_start.back(), ", vocab_size=", r.out.vocab_size,
                       ", logits=float32[", r.logit_rows, ", ", r.out.vocab_size,
                       "], hidden=[", layers, "])");
      });
}

}  // namespace

std::vector<StepRequest> step_requests(const py::handle& requests) {
  if (py::isinstance<StepRequest>(requests)) {
    type_error("requests", requests, "a list of StepRequest (put the one request in a list)");
  }
  if (PyUnicode_Check(requests.ptr()) || !PySequence_Check(requests.ptr())) {
    type_error("requests", requests, "a list of StepRequest");
  }
  const auto seq = py::reinterpret_steal<py::object>(PySequence_Fast(requests.ptr(), "requests"));
  if (!seq) throw py::error_already_set();
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq.ptr());
  std::vector<StepRequest> out;
  out.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    const py::handle item = PySequence_Fast_GET_ITEM(seq.ptr(), i);
    if (py::isinstance<StepRequest>(item)) {
      out.push_back(item.cast<const StepRequest&>());
    } else if (PyTuple_Check(item.ptr())) {
      type_error(
          str_cat("requests[", i, "]"), item,
          "a StepRequest; positional tuples are no longer accepted: write StepRequest(request_id, "
          "tokens, num_computed_tokens=..., num_logits=...)");
    } else {
      type_error(str_cat("requests[", i, "]"), item, "a StepRequest");
    }
  }
  return out;
}

StepResult to_python(runner::StepOutput&& out, int64_t hidden_size, bool return_logits) {
  const int64_t rows = out.logits_start.back();
  const int64_t logit_rows = return_logits ? rows : 0;
  if (static_cast<int64_t>(out.logits.size()) != logit_rows * out.vocab_size ||
      static_cast<int64_t>(out.argmax.size()) != rows ||
      static_cast<int64_t>(out.argmax_logprob.size()) != rows) {
    throw std::runtime_error(str_cat("ModelRunner.step: ", out.logits.size(), " logits and ",
                                     out.argmax.size(), " argmax values for ", rows, " rows of ",
                                     out.vocab_size, " (an internal error)"));
  }
  for (const auto& [layer, h] : out.hidden) {
    if (hidden_size <= 0 || static_cast<int64_t>(h.size()) % hidden_size != 0) {
      throw std::runtime_error(str_cat("ModelRunner.step: ", h.size(), " hidden values of layer ", layer,
                                       " for rows of ", hidden_size, " (an internal error)"));
    }
  }
  StepResult r;
  r.out = std::move(out);
  r.rows = spec_decode::StepRows::of(r.out);
  r.hidden_size = hidden_size;
  r.logit_rows = logit_rows;
  r.num_rows = rows;
  return r;
}

}  // namespace specdec::bindings

void register_step(py::module_& m) {
  specdec::bindings::bind_step_request(m);
  specdec::bindings::bind_step_output(m);
}
