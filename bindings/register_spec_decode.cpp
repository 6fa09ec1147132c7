// Speculative decoding: SpeculativeConfig, sequences, proposers, the rejection sampler, metrics
// (module specdec._core.spec). Per-token work stays in C++; the GIL is released around proposers.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <optional>

#include "common/errors.h"
#include "common/json.h"
#include "runner/model_runner.h"
#include "sampling/sampler.h"
#include "spec_decode/adaptive.h"
#include "spec_decode/config.h"
#include "spec_decode/decode_step.h"
#include "spec_decode/metrics.h"
#include "spec_decode/proposer.h"
#include "spec_decode/proposers/draft_model.h"
#include "spec_decode/proposers/dflash.h"
#include "spec_decode/proposers/hybrid.h"
#include "spec_decode/proposers/layer_skip.h"
#include "spec_decode/proposers/ngram.h"
#include "spec_decode/proposers/suffix.h"
#include "spec_decode/rejection.h"
#include "spec_decode/sequence.h"
#include "spec_decode/step_verifier.h"
#include "step_types.h"
#include "tokenizer/tokenizer.h"

namespace py = pybind11;
using namespace specdec;
using namespace specdec::spec_decode;

namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;
using IntArray = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

std::string type_name(const py::handle& value) {
  return py::type::of(value).attr("__name__").cast<std::string>();
}

// repr(value) cut to 80 characters, or its type when repr fails (a value nested too deeply).
std::string short_repr(const py::handle& value) {
  try {
    const std::string text = py::repr(value).cast<std::string>();
    return text.size() > 80 ? text.substr(0, 77) + "..." : text;
  } catch (const py::error_already_set&) {
    return str_cat("<a ", type_name(value), " that cannot be shown>");
  }
}

// The keyword arguments as JSON text. Each value is checked on its own, so that an error names its
// field: one json.dumps can take (Python bounds its recursion), nested at most kMaxJsonDepth
// levels.
std::string kwargs_json(const py::kwargs& kw) {
  const py::object dumps = py::module_::import("json").attr("dumps");
  const std::string allowed = "a JSON-like value (string, number, None)";
  for (const auto& [key, value] : kw) {
    const std::string field = "speculative_config." + py::str(key).cast<std::string>();
    std::string text;
    try {
      text = dumps(value).cast<std::string>();
    } catch (const py::error_already_set& e) {
      if (!e.matches(PyExc_RecursionError)) throw ConfigError(field, short_repr(value), allowed);
      throw ConfigError(field, str_cat("<a ", type_name(value), " nested too deeply to show>"),
                        str_cat(allowed, ", nested at most ", kMaxJsonDepth, " levels"));
    }
    try {
      parse_json(text);
    } catch (const FormatError& e) {
      const std::string shown = text.size() > 80 ? text.substr(0, 77) + "..." : text;  // ASCII
      throw ConfigError(field, shown, str_cat(allowed, " (", e.what(), ")"));
    }
  }
  return dumps(kw).cast<std::string>();
}

std::vector<Draft> run(Proposer& p, const std::vector<ProposeRequest>& reqs) {
  py::gil_scoped_release release;
  return p.propose(reqs);
}

// The drafts of asks[i] go to the end of steps[rows[i]] (as many rows as the draft has), then one
// forward verifies them: a drafting model's step in one call, with one return to Python (whose
// first statements after a forward run from cold caches). With a verifier, verifies[j] (the
// VerifyRequest of steps[j], every step a decode / verify row) is verified in the same call.
// Returns (drafts, StepOutput, seconds proposing, seconds in the forward, outcomes or None).
py::tuple propose_and_step(Proposer& p, const std::vector<ProposeRequest>& asks, const std::vector<int64_t>& rows,
                           runner::ModelRunner& runner, const py::object& steps, bool return_logits,
                           const std::shared_ptr<StepVerifier>& verifier, const py::object& verifies) {
  std::vector<runner::StepRequest> reqs = bindings::step_requests(steps);
  SPECDEC_CHECK(rows.size() == asks.size(), "rows", rows.size(), str_cat(asks.size(), " (one per ask)"));
  std::vector<int64_t> ask_of(reqs.size(), -1);
  for (size_t a = 0; a < rows.size(); ++a) {
    const int64_t i = rows[a];
    SPECDEC_CHECK(i >= 0 && i < static_cast<int64_t>(reqs.size()) && ask_of[i] < 0, "rows", i,
                  str_cat("distinct indices of steps in [0, ", reqs.size(), ")"));
    ask_of[i] = static_cast<int64_t>(a);
    // the row a draft extends: the same request's one-token decode at the end of its sequence
    const runner::StepRequest& s = reqs[i];
    const Sequence& seq = *asks[a].sequence;
    SPECDEC_CHECK(s.request_id == seq.request_id(), str_cat("steps[", i, "].request_id"), s.request_id,
                  str_cat("the request of asks[", a, "] (", seq.request_id(), ")"));
    SPECDEC_CHECK(s.tokens.size() == 1 && s.num_logits == 1 &&
                      s.num_computed_tokens + 1 == static_cast<int64_t>(seq.size()),
                  str_cat("steps[", i, "]"), str_cat(s.tokens.size(), " tokens after ", s.num_computed_tokens),
                  str_cat("one token with one logit row after ", seq.size() - 1, " (its sequence's last token)"));
  }
  std::vector<VerifyRequest*> vreqs;
  if (verifier) {
    SPECDEC_CHECK(!verifies.is_none() && py::len(verifies) == reqs.size(), "verifies",
                  verifies.is_none() ? std::string("None") : str_cat(py::len(verifies), " items"),
                  str_cat(reqs.size(), " VerifyRequests (one per step)"));
    for (size_t j = 0; j < reqs.size(); ++j) {
      const py::handle h = verifies[py::int_(j)];
      VerifyRequest* v = h.cast<VerifyRequest*>();
      const runner::StepRequest& s = reqs[j];
      SPECDEC_CHECK(v != nullptr && v->sequence && v->sequence->request_id() == s.request_id &&
                        s.num_logits == static_cast<int>(s.tokens.size()) &&
                        s.num_computed_tokens + static_cast<int64_t>(s.tokens.size()) ==
                            static_cast<int64_t>(v->sequence->size()),
                    str_cat("verifies[", j, "]"), v && v->sequence ? v->sequence->request_id() : "None",
                    str_cat("the VerifyRequest of steps[", j, "] (", s.request_id,
                            "), a decode / verify row at its sequence's end"));
      vreqs.push_back(v);
    }
  }
  std::vector<Draft> drafts;
  runner::StepOutput out;
  double seconds = 0, forward_seconds = 0;
  std::vector<VerifyItem> items;
  std::vector<VerifyResult> decided;
  {
    py::gil_scoped_release release;
    const auto t0 = std::chrono::steady_clock::now();
    drafts = p.propose(asks);
    const auto t1 = std::chrono::steady_clock::now();
    seconds = std::chrono::duration<double>(t1 - t0).count();
    for (size_t i = 0; i < asks.size(); ++i) {
      const std::vector<int32_t>& t = drafts[i].tokens;
      SPECDEC_CHECK(static_cast<int>(t.size()) <= asks[i].num_speculative_tokens, "draft length", t.size(),
                    str_cat("at most num_speculative_tokens = ", asks[i].num_speculative_tokens));
      runner::StepRequest& s = reqs[rows[i]];
      s.tokens.insert(s.tokens.end(), t.begin(), t.end());
      s.num_logits += static_cast<int>(t.size());
    }
    out = runner.step(reqs, {}, return_logits, 0);
    forward_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
    if (verifier) {
      int64_t row_end = 0;
      for (size_t j = 0; j < reqs.size(); ++j) {
        row_end += reqs[j].num_logits;
        const Draft* d = ask_of[j] >= 0 && !drafts[ask_of[j]].tokens.empty() ? &drafts[ask_of[j]] : nullptr;
        items.push_back(VerifyItem{vreqs[j], d, row_end, reqs[j].num_computed_tokens});
      }
      decided = verifier->decide(items, StepRows::of(out));  // the sampled rows' work
    }
  }
  py::object outcomes = py::none();
  if (verifier) outcomes = bindings::to_python(verifier->commit(items, std::move(decided), StepRows::of(out)));
  const int64_t hidden = runner.config().hidden_size;
  return py::make_tuple(std::move(drafts), bindings::to_python(std::move(out), hidden, return_logits), seconds,
                        forward_seconds, std::move(outcomes));
}

// A decode / verify step of the running requests scheduled, drafted, run and verified in one call
// (spec_decode/decode_step.h): verifies[i] the i-th request's VerifyRequest, asks[i] its
// ProposeRequest or None. Returns None (nothing run) when a request cannot get the KV blocks of its
// one decode token, else (draft lengths, StepOutput, seconds proposing, seconds in the forward,
// outcomes, draft tokens asked of the proposer).
// StepConstraints calling a Python object (specdec.engine.core's step masker) with the GIL:
// cut([[draft tokens] per row], [has probabilities per row]) -> [tokens kept per row]; masks([row ends]) -> (rows, int32
// [len(rows), words]) or None.
class PyStepConstraints final : public StepConstraints {
 public:
  explicit PyStepConstraints(py::object obj) : obj_(std::move(obj)) {}
  void cut(std::vector<Draft>& drafts) override {
    py::gil_scoped_acquire gil;
    py::list tokens(drafts.size()), has_probs(drafts.size());
    for (size_t i = 0; i < drafts.size(); ++i) {
      tokens[i] = py::cast(drafts[i].tokens);
      has_probs[i] = py::bool_(drafts[i].has_probs());
    }
    const auto keep = obj_.attr("cut")(tokens, has_probs).cast<std::vector<int64_t>>();
    SPECDEC_CHECK(keep.size() == drafts.size(), "cut", str_cat(keep.size(), " lengths"),
                  str_cat(drafts.size(), " (one per row)"));
    for (size_t i = 0; i < drafts.size(); ++i) {
      Draft& d = drafts[i];
      const auto n = static_cast<size_t>(std::clamp<int64_t>(keep[i], 0, static_cast<int64_t>(d.tokens.size())));
      if (n == d.tokens.size()) continue;
      d.tokens.resize(n);
      if (d.has_probs()) d.probs.resize(n * static_cast<size_t>(d.vocab_size));
      if (n == 0) d = Draft{};
    }
  }
  void mask(const std::vector<int64_t>& row_end, runner::StepOutput& out) override {
    py::gil_scoped_acquire gil;
    const py::object got = obj_.attr("masks")(row_end);
    if (got.is_none()) return;
    const auto pair = got.cast<py::tuple>();
    const auto rows = pair[0].cast<std::vector<int64_t>>();
    const auto masks = pair[1].cast<py::array_t<int32_t, py::array::c_style>>();
    SPECDEC_CHECK(masks.ndim() == 2 && masks.shape(0) == static_cast<py::ssize_t>(rows.size()), "masks",
                  str_cat(masks.ndim(), " dims"), str_cat("[", rows.size(), ", words]"));
    const int64_t vocab = out.vocab_size, words = masks.shape(1);
    const auto num_rows = static_cast<int64_t>(out.logits.size()) / std::max<int64_t>(vocab, 1);
    for (size_t j = 0; j < rows.size(); ++j) {
      SPECDEC_CHECK(rows[j] >= 0 && rows[j] < num_rows, "mask row", rows[j], str_cat("a logits row < ", num_rows));
      sampling::apply_token_bitmask(out.logits.data() + rows[j] * vocab, vocab,
                                    masks.data() + static_cast<int64_t>(j) * words, words);
    }
  }

 private:
  py::object obj_;
};

py::object decode_step(Proposer& p, runner::ModelRunner& runner, StepVerifier& verifier, const py::list& verifies,
                       const py::list& asks, bool return_logits, const py::object& constraints) {
  SPECDEC_CHECK(py::len(asks) == py::len(verifies), "asks", str_cat(py::len(asks), " items"),
                str_cat(py::len(verifies), " (one per VerifyRequest, None for no draft)"));
  std::vector<DecodeRow> rows(py::len(verifies));
  for (size_t i = 0; i < rows.size(); ++i) {
    const py::handle v = verifies[i], a = asks[i];
    SPECDEC_CHECK(py::isinstance<VerifyRequest>(v), str_cat("verifies[", i, "]"), short_repr(v), "a VerifyRequest");
    SPECDEC_CHECK(a.is_none() || py::isinstance<ProposeRequest>(a), str_cat("asks[", i, "]"), short_repr(a),
                  "a ProposeRequest or None");
    rows[i].verify = v.cast<VerifyRequest*>();
    if (!a.is_none()) rows[i].ask = a.cast<const ProposeRequest*>();
  }
  std::optional<DecodeStep> step;
  std::optional<PyStepConstraints> hook;
  if (!constraints.is_none()) hook.emplace(constraints);
  {
    py::gil_scoped_release release;
    step = run_decode_step(p, runner, verifier, rows, return_logits, hook ? &*hook : nullptr);
  }
  if (!step) return py::none();
  py::list lens(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) lens[i] = py::int_(step->drafts[i].tokens.size());
  py::object outcomes =
      bindings::to_python(verifier.commit(step->items, std::move(step->decided), StepRows::of(step->out)));
  const int64_t hidden = runner.config().hidden_size;
  return py::make_tuple(std::move(lens), bindings::to_python(std::move(step->out), hidden, return_logits),
                        step->propose_seconds, step->forward_seconds, std::move(outcomes), step->num_asked);
}

}  // namespace

void register_spec_decode(py::module_& root) {
  py::module_ m = root.def_submodule("spec_decode", "Speculative decoding parts (C++)");

  py::class_<SpeculativeConfig>(m, "SpeculativeConfig",
                                "What to speculate with: SpeculativeConfig(method='ngram', num_speculative_tokens=4), "
                                "SpeculativeConfig.from_json(text). vLLM's field names; ValueError naming the field "
                                "for unknown keys and bad values.")
      .def(py::init([](const py::kwargs& kw) {
        return SpeculativeConfig::from_json_text(kwargs_json(kw));
      }))
      .def_static("from_json", &SpeculativeConfig::from_json_text, py::arg("text"),
                  "From a JSON object's text; ValueError naming the field for unknown keys and bad values.")
      .def("to_json", [](const SpeculativeConfig& c) { return c.to_json().dump(); })
      .def("uses_drafter", &SpeculativeConfig::uses_drafter)
      .def_readonly("method", &SpeculativeConfig::method)
      .def_readonly("model", &SpeculativeConfig::model)
      .def_readonly("num_speculative_tokens", &SpeculativeConfig::num_speculative_tokens)
      .def_property_readonly("attention_backend", [](const SpeculativeConfig& c) -> py::object {
        if (c.attention_backend.empty()) return py::none();
        return py::str(c.attention_backend);
      })
      .def_property_readonly("device", [](const SpeculativeConfig& c) -> py::object {
        if (c.device.empty()) return py::none();
        return py::str(c.device);
      })
      .def_readonly("prompt_lookup_min", &SpeculativeConfig::prompt_lookup_min)
      .def_readonly("prompt_lookup_max", &SpeculativeConfig::prompt_lookup_max)
      .def_readonly("suffix_decoding_max_tree_depth", &SpeculativeConfig::suffix_decoding_max_tree_depth)
      .def_readonly("suffix_decoding_max_cached_requests", &SpeculativeConfig::suffix_decoding_max_cached_requests)
      .def_readonly("suffix_decoding_max_spec_factor", &SpeculativeConfig::suffix_decoding_max_spec_factor)
      .def_readonly("suffix_decoding_min_token_prob", &SpeculativeConfig::suffix_decoding_min_token_prob)
      .def_readonly("max_model_len", &SpeculativeConfig::max_model_len)
      .def_readonly("draft_kv_cache_memory_bytes", &SpeculativeConfig::draft_kv_cache_memory_bytes)
      .def_readonly("draft_kv_cache_fraction", &SpeculativeConfig::draft_kv_cache_fraction)
      .def_property_readonly("kv_cache_dtype", [](const SpeculativeConfig& c) -> py::object {
        if (c.kv_cache_dtype.empty()) return py::none();
        return py::str(c.kv_cache_dtype);
      })
      .def_readonly("disable_by_batch_size", &SpeculativeConfig::disable_by_batch_size)
      .def_readonly("adaptive", &SpeculativeConfig::adaptive)
      .def_readonly("proposers", &SpeculativeConfig::proposers)
      .def_readonly("disable_hybrid_kv_cache_manager", &SpeculativeConfig::disable_hybrid_kv_cache_manager)
      .def("drafter_config", &SpeculativeConfig::drafter_config, py::return_value_policy::copy,
           "The config whose fields describe the drafter: a hybrid's draft_model part, else this one.")
      .def_property_readonly("exit_layer", [](const SpeculativeConfig& c) -> py::object {
        if (c.method != "layer_skip") return py::none();
        return c.exit_layer == 0 ? py::object(py::str("auto")) : py::object(py::int_(c.exit_layer));
      })
      .def_readonly("draft_vocab_size", &SpeculativeConfig::draft_vocab_size)
      .def_property_readonly("draft_vocab_file", [](const SpeculativeConfig& c) -> py::object {
        if (c.draft_vocab_file.empty()) return py::none();
        return py::str(c.draft_vocab_file);
      })
      .def_property_readonly_static("max_spec_len", [](py::object) { return SpeculativeConfig::kMaxSpecLen; })
      .def("__repr__", [](const SpeculativeConfig& c) { return "SpeculativeConfig(" + c.to_json().dump() + ")"; });

  py::class_<AdaptiveK, std::shared_ptr<AdaptiveK>>(m, "AdaptiveK",
                        "Adaptive speculation: k per request from measured acceptance and costs.")
      .def(py::init<int>(), py::arg("max_k"))
      .def("choose", &AdaptiveK::choose, py::arg("request_id"), py::arg("limit"), py::arg("batch_rows") = 1)
      .def("observe_draft", &AdaptiveK::observe_draft, py::arg("request_id"), py::arg("drafted"), py::arg("accepted"))
      .def("observe_forward", &AdaptiveK::observe_forward, py::arg("rows"), py::arg("seconds"))
      .def("observe_proposer", &AdaptiveK::observe_proposer, py::arg("tokens"), py::arg("seconds"))
      .def("forget", &AdaptiveK::forget, py::arg("request_id"))
      .def("forward_seconds", &AdaptiveK::forward_seconds, py::arg("rows"))
      .def("proposer_seconds", &AdaptiveK::proposer_seconds, py::arg("tokens"))
      .def("acceptance", &AdaptiveK::acceptance, py::arg("request_id"))
      .def("expected_tokens", &AdaptiveK::expected_tokens, py::arg("request_id"), py::arg("k"))
      .def_property_readonly("max_k", &AdaptiveK::max_k)
      .def_property_readonly("num_off_steps", &AdaptiveK::num_off_steps)
      .def_property_readonly("num_probes", &AdaptiveK::num_probes);

  py::class_<Sequence, std::shared_ptr<Sequence>>(m, "Sequence", "A request's prompt and accepted tokens.")
      .def(py::init<std::string, std::vector<int32_t>>(), py::arg("request_id"), py::arg("prompt_token_ids"))
      .def("append", py::overload_cast<const std::vector<int32_t>&>(&Sequence::append), py::arg("token_ids"))
      .def_property_readonly("request_id", &Sequence::request_id)
      .def_property_readonly("token_ids", &Sequence::tokens)
      .def_property_readonly("output_token_ids", [](const Sequence& s) {
        return std::vector<int32_t>(s.tokens().begin() + s.num_prompt_tokens(), s.tokens().end());
      })
      .def_property_readonly("num_prompt_tokens", &Sequence::num_prompt_tokens)
      .def_property_readonly("num_output_tokens", &Sequence::num_output_tokens)
      .def_property_readonly("last_token", [](const Sequence& s) { return s.tokens().back(); })
      .def("__len__", &Sequence::size);

  py::class_<ProposeRequest>(m, "ProposeRequest",
                             "One request asking for drafts: its sequence, k and sampling.")
      .def(py::init([](std::shared_ptr<Sequence> seq, int k, double temperature, int top_k, double top_p,
                       double min_p, sampling::Generator* gen) {
             SPECDEC_CHECK(k >= 0, "num_speculative_tokens", k, ">= 0");
             ProposeRequest r;
             r.sequence = std::move(seq);
             r.num_speculative_tokens = k;
             r.params = sampling::SamplingParams::make(temperature, top_k, top_p, min_p);
             SPECDEC_CHECK(r.params.greedy() || gen != nullptr, "generator", "None",
                          "a SamplingGenerator for a sampled request");
             r.generator = gen;
             return r;
           }),
           py::arg("sequence"), py::arg("num_speculative_tokens"), py::arg("temperature") = 0.0,
           py::arg("top_k") = 0, py::arg("top_p") = 1.0, py::arg("min_p") = 0.0,
           py::arg("generator") = nullptr, py::keep_alive<1, 2>(), py::keep_alive<1, 8>())
      .def_property_readonly("request_id", [](const ProposeRequest& r) { return r.sequence->request_id(); })
      .def_property_readonly("token_ids", [](const ProposeRequest& r) { return r.sequence->tokens(); })
      .def_property_readonly("num_prompt_tokens", [](const ProposeRequest& r) { return r.sequence->num_prompt_tokens(); })
      .def_readonly("num_speculative_tokens", &ProposeRequest::num_speculative_tokens)
      .def_property_readonly("temperature", [](const ProposeRequest& r) { return r.params.temperature; })
      .def_property_readonly("greedy", [](const ProposeRequest& r) { return r.params.greedy(); });

  py::class_<Draft>(m, "Draft", "Draft tokens, and their draft probabilities [k, vocab] when sampled.")
      .def(py::init([](std::vector<int32_t> tokens, std::optional<FloatArray> probs) {
             Draft d;
             d.tokens = std::move(tokens);
             if (probs) {
               SPECDEC_CHECK(probs->ndim() == 2 && probs->shape(0) == static_cast<py::ssize_t>(d.tokens.size()),
                            "probs rows", probs->ndim() == 2 ? probs->shape(0) : -1,
                            str_cat(d.tokens.size(), " (one row of draft probabilities per token)"));
               d.vocab_size = probs->shape(1);
               d.probs.assign(probs->data(), probs->data() + probs->size());
             }
             return d;
           }),
           py::arg("tokens"), py::arg("probs") = py::none())
      .def_readonly("tokens", &Draft::tokens)
      .def_property_readonly("has_probs", &Draft::has_probs)
      .def_property_readonly("probs", [](const Draft& d) -> py::object {
        if (!d.has_probs()) return py::none();
        py::array_t<float> a({static_cast<int64_t>(d.tokens.size()), d.vocab_size});
        std::copy(d.probs.begin(), d.probs.end(), a.mutable_data());
        return a;
      })
      .def("truncated",
           [](const Draft& d, size_t n) {
             Draft t;
             n = std::min(n, d.tokens.size());
             t.tokens.assign(d.tokens.begin(), d.tokens.begin() + static_cast<std::ptrdiff_t>(n));
             if (d.has_probs()) {
               t.vocab_size = d.vocab_size;
               t.probs.assign(d.probs.begin(), d.probs.begin() + static_cast<std::ptrdiff_t>(n * d.vocab_size));
             }
             return t;
           },
           py::arg("n"), "The draft's first n tokens (and their probabilities): structured outputs cut a draft "
           "at its first token the grammar forbids.")
      .def("__len__", [](const Draft& d) { return d.tokens.size(); })
      .def("__repr__", [](const Draft& d) { return str_cat("Draft(", d.tokens.size(), " tokens", d.has_probs() ? ", probs)" : ")"); });

  py::class_<Proposer, std::shared_ptr<Proposer>>(m, "Proposer", "A built-in (C++) proposer.")
      .def_property_readonly("name", &Proposer::name)
      .def("propose", &run, py::arg("requests"), "One Draft per request, in order.")
      .def("finish", &Proposer::finish, py::arg("sequence"), "The request ended: drop its state.")
      .def_property_readonly("drafts_full_length", &Proposer::drafts_full_length,
                             "Drafts come as long as asked (a drafting model): propose_and_step applies.");
  m.def("decode_step", &decode_step, py::arg("proposer"), py::arg("runner"), py::arg("verifier"),
        py::arg("verifies"), py::arg("asks"), py::arg("return_logits"), py::arg("constraints") = py::none(),
        "A decode / verify step of the running requests in one call: KV blocks reserved (a draft that "
        "does not fit is dropped), drafts proposed, the forward run and verified. None (nothing run) "
        "when a request cannot get the blocks of one token; else (draft lengths, StepOutput, seconds "
        "proposing, seconds in the forward, outcomes, draft tokens asked of the proposer).");
  m.def("propose_and_step", &propose_and_step, py::arg("proposer"), py::arg("asks"), py::arg("rows"),
        py::arg("runner"), py::arg("steps"), py::arg("return_logits") = false, py::arg("verifier") = nullptr,
        py::arg("verifies") = py::none(),
        "Proposes for asks, appends draft i to steps[rows[i]] (tokens and logit rows), runs one forward "
        "of runner over steps and, with a verifier, verifies every step (verifies[j]: the VerifyRequest of "
        "steps[j]), without the GIL: (drafts, StepOutput, seconds proposing, seconds in the forward, "
        "outcomes as StepVerifier.verify gives them, or None).");
  py::class_<NgramProposer, Proposer, std::shared_ptr<NgramProposer>>(m, "NgramProposer")
      .def(py::init<int, int, int64_t>(), py::arg("prompt_lookup_min"), py::arg("prompt_lookup_max"),
           py::arg("max_model_len") = 0);
  py::class_<SuffixProposer, Proposer, std::shared_ptr<SuffixProposer>>(m, "SuffixProposer")
      .def(py::init<int, int64_t, double, double, int64_t>(), py::arg("max_tree_depth") = 24,
           py::arg("max_cached_requests") = 10000, py::arg("max_spec_factor") = 1.0,
           py::arg("min_token_prob") = 0.1, py::arg("max_model_len") = 0)
      .def_property_readonly("num_cached_requests", &SuffixProposer::num_cached_requests)
      .def_property_readonly("num_active_requests", &SuffixProposer::num_active_requests);
  py::class_<DraftModelProposer, Proposer, std::shared_ptr<DraftModelProposer>>(m, "DraftModelProposer")
      .def(py::init<std::shared_ptr<runner::ModelRunner>, int64_t>(), py::arg("drafter"),
           py::arg("target_vocab_size"))
      .def_property_readonly("drafter", &DraftModelProposer::drafter)
      .def_property_readonly("num_steps", &DraftModelProposer::num_steps)
      .def_property_readonly("num_tokens", &DraftModelProposer::num_tokens);
  py::class_<LayerSkipProposer, Proposer, std::shared_ptr<LayerSkipProposer>>(
      m, "LayerSkipProposer",
      "Self-drafting with the target's first exit_layer layers, its final norm and its LM head "
      "(exit_layer 0: auto, from measured acceptance and step times).")
      .def(py::init<std::shared_ptr<runner::ModelRunner>, int>(), py::arg("target"), py::arg("exit_layer") = 0)
      .def_property_readonly("is_auto", &LayerSkipProposer::is_auto)
      .def_property_readonly("exit_layer", &LayerSkipProposer::exit_layer,
                             "The exit layer the next draft uses (auto: the current choice).")
      .def_property_readonly("candidates", &LayerSkipProposer::candidates)
      .def_property_readonly("num_steps", &LayerSkipProposer::num_steps)
      .def("stats", [](const LayerSkipProposer& p) {
        py::list out;
        for (const auto& s : p.stats()) {
          py::dict d;
          d["exit_layer"] = s.exit_layer;
          d["drafts"] = s.drafts;
          d["acceptance_per_pos"] = s.acceptance;
          d["step_seconds"] = s.step_seconds;
          d["expected_tokens_per_second"] = s.expected_tokens_per_second;
          out.append(d);
        }
        return out;
      }, "Per candidate exit layer: drafts seen, acceptance per position, seconds per early-exit step, "
         "expected tokens/s.");
  py::class_<DFlashProposer, Proposer, std::shared_ptr<DFlashProposer>>(
      m, "DFlashProposer",
      "z-lab's DFlash block drafter: one non-causal forward drafts k tokens from the target's hidden "
      "states (written into the drafter's cache by every target step, on the device).")
      .def(py::init<std::shared_ptr<runner::ModelRunner>, std::shared_ptr<runner::ModelRunner>>(),
           py::arg("target"), py::arg("drafter"))
      .def_property_readonly("drafter", &DFlashProposer::drafter)
      .def_property_readonly("max_draft_tokens", &DFlashProposer::max_draft_tokens)
      .def_property_readonly("num_steps", &DFlashProposer::num_steps);
  py::class_<HybridProposer, Proposer, std::shared_ptr<HybridProposer>>(
      m, "HybridProposer",
      "Several built-in proposers; per request and step the draft with the most expected tokens, a "
      "costly part run only where it can pay (measured acceptance and costs).")
      .def(py::init<std::vector<std::shared_ptr<Proposer>>, std::vector<int>>(), py::arg("proposers"),
           py::arg("part_tokens") = std::vector<int>{})
      .def_property_readonly("parts", &HybridProposer::parts)
      .def_property_readonly("verify_seconds", &HybridProposer::verify_seconds)
      .def("stats", [](const HybridProposer& p) {
        py::list out;
        for (const auto& s : p.stats()) {
          py::dict d;
          d["name"] = s.name;
          d["calls"] = s.calls;
          d["drafted"] = s.drafted;
          d["taken"] = s.taken;
          d["acceptance_per_pos"] = s.acceptance;
          d["seconds_per_call"] = s.seconds_per_call;
          out.append(d);
        }
        return out;
      }, "Per part: calls, request-steps drafted and taken, acceptance per position (all requests), "
         "seconds per call.");

  m.def("ngram_lookup", &ngram_lookup, py::arg("tokens"), py::arg("min_n"), py::arg("max_n"),
        py::arg("k"), py::arg("max_model_len") = 0);
  m.def("check_vocab_compatible", [](const std::string& target, const std::string& draft) {
        py::gil_scoped_release release;
        check_vocab_compatible(tokenizer::Tokenizer::from_file(target), tokenizer::Tokenizer::from_file(draft));
      }, py::arg("target_path"), py::arg("draft_path"),
      "ValueError naming what differs when the drafter's vocabulary is not the target's (llama.cpp's rule).");

  m.def("verify_greedy", [](const std::vector<int32_t>& draft, const IntArray& argmax) {
        SPECDEC_CHECK(argmax.ndim() == 1 && argmax.shape(0) == static_cast<py::ssize_t>(draft.size()) + 1,
                     "target_argmax", argmax.ndim() == 1 ? argmax.shape(0) : -1,
                     str_cat(draft.size() + 1, " rows (draft + 1)"));
        const VerifyResult r = verify_greedy(draft, argmax.data());
        return py::make_tuple(r.tokens, r.num_accepted);
      }, py::arg("draft"), py::arg("target_argmax"),
      "(tokens, num_accepted): accept while draft == argmax, then the target's token.");
  m.def("verify_sampled", [](const Draft& draft, const FloatArray& logits, double temperature, int top_k,
                             double top_p, double min_p, sampling::Generator* gen, int64_t first_position) {
        SPECDEC_CHECK(logits.ndim() == 2 && logits.shape(0) == static_cast<py::ssize_t>(draft.tokens.size()) + 1,
                     "target_logits rows", logits.ndim() == 2 ? logits.shape(0) : -1,
                     str_cat(draft.tokens.size() + 1, " rows (draft + 1) of a 2-D array"));
        const sampling::SamplingParams p = sampling::SamplingParams::make(temperature, top_k, top_p, min_p);
        SPECDEC_CHECK(p.greedy() || gen != nullptr, "generator", "None", "a SamplingGenerator for a sampled request");
        sampling::Generator unused(0);  // greedy verification draws nothing
        VerifyResult r;
        {
          py::gil_scoped_release release;
          r = verify_sampled(draft, logits.data(), logits.shape(1), p, gen ? *gen : unused, first_position);
        }
        return py::make_tuple(r.tokens, r.num_accepted);
      }, py::arg("draft"), py::arg("target_logits"), py::arg("temperature"), py::arg("top_k") = 0,
      py::arg("top_p") = 1.0, py::arg("min_p") = 0.0, py::arg("generator") = nullptr,
      py::arg("first_position") = 0,
      "(tokens, num_accepted): row i decides the token at first_position + i; speculative sampling (accept with min(1, p/q), recover from "
      "normalize(max(0, p - q)), a bonus token after k acceptances).");

  py::class_<SpecDecodingStats>(m, "SpecDecodingStats", "vLLM's speculative-decoding counters.")
      .def(py::init<>())
      .def("observe_draft", &SpecDecodingStats::observe_draft, py::arg("num_draft_tokens"),
           py::arg("num_accepted_tokens"))
      .def("add", &SpecDecodingStats::add, py::arg("other"))
      .def_readwrite("num_drafts", &SpecDecodingStats::num_drafts)
      .def_readwrite("num_draft_tokens", &SpecDecodingStats::num_draft_tokens)
      .def_readwrite("num_accepted_tokens", &SpecDecodingStats::num_accepted_tokens)
      .def_readwrite("num_accepted_tokens_per_pos", &SpecDecodingStats::num_accepted_tokens_per_pos)
      .def_property_readonly("acceptance_rate", &SpecDecodingStats::acceptance_rate)
      .def_property_readonly("mean_acceptance_length", &SpecDecodingStats::mean_acceptance_length)
      .def_property_readonly("acceptance_rate_per_pos", &SpecDecodingStats::acceptance_rate_per_pos);
}
