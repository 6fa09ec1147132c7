// The step's verification in one call (spec_decode/step_verifier.h): specdec._core.spec_decode.
// VerifyRequest (one per request, built when it is added) and StepVerifier.verify(items, output).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/errors.h"
#include "runner/model_runner.h"
#include "spec_decode/step_verifier.h"
#include "step_types.h"

namespace py = pybind11;
using namespace specdec;
using namespace specdec::spec_decode;

namespace {

// items: [(VerifyRequest, Draft or None, row_end, num_computed)], one per request of the step.
std::vector<VerifyItem> items_of(const py::list& items) {
  std::vector<VerifyItem> out;
  out.reserve(items.size());
  for (const py::handle& h : items) {
    const auto t = py::reinterpret_borrow<py::tuple>(h);
    SPECDEC_CHECK(py::isinstance<py::tuple>(h) && t.size() == 4, "items", py::str(h).cast<std::string>(),
                  "(VerifyRequest, Draft or None, row_end, num_computed) tuples");
    VerifyItem it;
    it.request = t[0].cast<VerifyRequest*>();
    it.draft = t[1].is_none() ? nullptr : t[1].cast<const Draft*>();
    it.row_end = t[2].cast<int64_t>();
    it.num_computed = t[3].cast<int64_t>();
    out.push_back(it);
  }
  return out;
}

// The view of what ModelRunner.step returned to Python.
StepRows rows_of(const bindings::StepResult& r) { return r.rows; }

}  // namespace

namespace specdec::bindings {

py::list to_python(const std::vector<VerifyOutcome>& outs) {
  py::list result(outs.size());
  for (size_t i = 0; i < outs.size(); ++i) {
    const VerifyOutcome& o = outs[i];
    result[i] = py::make_tuple(py::cast(o.tokens), o.num_accepted, o.argmax_logprob, static_cast<int>(o.finish),
                               o.num_computed);
  }
  return result;
}

}  // namespace specdec::bindings

void register_verify(py::module_& root) {
  py::module_ m = root.attr("spec_decode").cast<py::module_>();
  py::class_<VerifyRequest, std::shared_ptr<VerifyRequest>>(
      m, "VerifyRequest", "What verification knows of a request for its life (built once per request).")
      .def(py::init([](std::shared_ptr<Sequence> seq, double temperature, int top_k, double top_p, double min_p,
                       std::shared_ptr<sampling::Generator> gen, bool on_argmax, bool ignore_eos,
                       std::vector<int32_t> stop_token_ids, std::optional<int64_t> max_tokens, bool append) {
             auto r = std::make_shared<VerifyRequest>();
             SPECDEC_CHECK(seq != nullptr, "sequence", "None", "the request's Sequence");
             r->sequence = std::move(seq);
             r->params = sampling::SamplingParams::make(temperature, top_k, top_p, min_p);
             SPECDEC_CHECK(r->params.greedy() || gen != nullptr, "generator", "None",
                           "a SamplingGenerator for a sampled request");
             r->generator = std::move(gen);
             r->on_argmax = on_argmax;
             SPECDEC_CHECK(!on_argmax || r->params.greedy(), "on_argmax", "True", "only for a greedy request");
             r->ignore_eos = ignore_eos;
             r->stop_token_ids = std::move(stop_token_ids);
             r->max_tokens = max_tokens.value_or(-1);
             r->append = append;
             return r;
           }),
           py::arg("sequence"), py::arg("temperature"), py::arg("top_k") = 0, py::arg("top_p") = 1.0,
           py::arg("min_p") = 0.0, py::arg("generator") = nullptr, py::arg("on_argmax") = false,
           py::arg("ignore_eos") = false, py::arg("stop_token_ids") = std::vector<int32_t>{},
           py::arg("max_tokens") = std::nullopt, py::arg("append") = true)
      .def_readonly("stats", &VerifyRequest::stats, py::return_value_policy::reference_internal)
      .def_readwrite("on_argmax", &VerifyRequest::on_argmax);

  py::class_<StepVerifier, std::shared_ptr<StepVerifier>>(
      m, "StepVerifier",
      "Verifies a step's requests in one call: tokens, counters, adaptive k, rollback, stops, appends.")
      .def(py::init<std::shared_ptr<runner::ModelRunner>, std::vector<int32_t>, int64_t, std::shared_ptr<AdaptiveK>>(),
           py::arg("target"), py::arg("eog_ids"), py::arg("max_model_len"), py::arg("adaptive") = nullptr)
      .def("verify",
           [](StepVerifier& v, const py::list& items, const bindings::StepResult& output) {
             const std::vector<VerifyItem> its = items_of(items);
             const StepRows so = rows_of(output);
             std::vector<VerifyResult> decided;
             {
               py::gil_scoped_release release;  // the sampled rows' work
               decided = v.decide(its, so);
             }
             return bindings::to_python(v.commit(its, std::move(decided), so));
           },
           py::arg("items"), py::arg("output"),
           "[(tokens, num_accepted, argmax_logprob, finish, num_computed)] per item; finish: 0 none, 1 end of "
           "generation, 2 stop token, 3 length.")
      .def_property_readonly("stats", &StepVerifier::stats, py::return_value_policy::reference_internal)
      .def("reset_stats", &StepVerifier::reset_stats);
}
