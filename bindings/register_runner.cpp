// ModelRunner (one forward over a ragged batch) and the host sampler.
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "common/dtype.h"
#include "common/errors.h"
#include "model/config.h"
#include "model/dflash.h"
#include "model/gguf.h"
#include "runner/block_budget.h"
#include "runner/model_runner.h"
#include "runner/model_weights.h"
#include "tokenizer/tokenizer.h"
#include "sampling/sampler.h"
#include "step_types.h"

namespace py = pybind11;
using namespace specdec;

namespace {

// ModelRunner.step: StepRequest in, StepOutput out (step_types.h); the forward runs without the GIL.
bindings::StepResult step(runner::ModelRunner& r, const py::object& requests,
                          const std::vector<int>& hidden_layers, bool return_logits, int num_layers) {
  const std::vector<runner::StepRequest> reqs = bindings::step_requests(requests);
  runner::StepOutput out;
  {
    py::gil_scoped_release release;
    out = r.step(reqs, hidden_layers, return_logits, num_layers);
  }
  return bindings::to_python(std::move(out), r.config().hidden_size, return_logits);
}

const float* row(const py::array_t<float, py::array::c_style | py::array::forcecast>& a) {
  SPECDEC_CHECK(a.ndim() == 1 && a.shape(0) > 0, "logits", a.ndim(), "a 1-D array of one row of logits");
  return a.data();
}

}  // namespace

void register_runner(py::module_& m) {
  py::class_<runner::ModelRunner, std::shared_ptr<runner::ModelRunner>>(m, "ModelRunner",
                                  "One model on one device: weights, KV cache, attention backends, "
                                  "and one forward per step over a ragged batch.")
      .def(py::init([](std::shared_ptr<device::Device> dev, const std::string& path,
                       const std::string& attention_backend, int64_t max_model_len,
                       int64_t kv_cache_memory_bytes, int block_size, const std::string& kv_cache_dtype,
                       int64_t max_num_batched_tokens, int64_t max_num_logits,
                       std::function<void(int64_t, int64_t)> progress,
                       std::vector<int32_t> logit_token_ids, bool disable_hybrid_kv_cache_manager,
                       bool enable_prefix_caching) {
             runner::RunnerOptions o;
             o.disable_hybrid_kv_cache_manager = disable_hybrid_kv_cache_manager;
             o.enable_prefix_caching = enable_prefix_caching;
             o.attention_backend = attention_backend;
             o.max_model_len = max_model_len;
             o.kv_cache_memory_bytes = kv_cache_memory_bytes;
             o.block_size = block_size;
             o.kv_cache_dtype = parse_dtype(kv_cache_dtype, "kv_cache_dtype");
             o.max_num_batched_tokens = max_num_batched_tokens;
             o.max_num_logits = max_num_logits;
             o.logit_token_ids = std::move(logit_token_ids);
             runner::LoadProgress cb;
             if (progress) {
               cb = [progress](int64_t done, int64_t total) {
                 py::gil_scoped_acquire gil;
                 progress(done, total);
               };
             }
             py::gil_scoped_release release;
             return std::make_shared<runner::ModelRunner>(std::move(dev), path, o, cb);
           }),
           py::arg("context"), py::arg("path"), py::arg("attention_backend") = "",
           py::arg("max_model_len") = 0, py::arg("kv_cache_memory_bytes") = int64_t{1} << 30,
           py::arg("block_size") = 16, py::arg("kv_cache_dtype") = "f16",
           py::arg("max_num_batched_tokens") = 512, py::arg("max_num_logits") = 128,
           py::arg("progress") = nullptr, py::arg("logit_token_ids") = std::vector<int32_t>{},
           py::arg("disable_hybrid_kv_cache_manager") = false, py::arg("enable_prefix_caching") = false,
           "logit_token_ids: logits only for these ids (strictly increasing; a drafter's reduced "
           "vocabulary): logit column j is token logit_token_ids[j], argmax a token id. "
           "disable_hybrid_kv_cache_manager: one KV-cache group managed as full attention (vLLM's switch). "
           "enable_prefix_caching: full blocks of committed tokens are cached under their prefix and "
           "shared by later requests (claim_prefix).")
      .def("step", &step, py::arg("requests"), py::arg("hidden_layers") = std::vector<int>{},
           py::arg("return_logits") = true, py::arg("num_layers") = 0,
           "One forward over a ragged batch. requests: a list of StepRequest (prefill chunks, decodes "
           "and k+1 verify tokens together; positional tuples are refused with a TypeError). "
           "hidden_layers: return the residual stream after these layers (-1: after the final norm). "
           "return_logits=False skips the [rows, vocab] logits transfer. num_layers=L exits early: the "
           "first L decoder layers, then the final norm and the head (layer-skip drafting; truncate "
           "those positions before a full step over them). Returns a StepOutput: logits "
           "float32 [rows, vocab_size] (0 rows with return_logits=False), logits_start (first row per "
           "request, then the total; rows(i) is request i's slice), argmax int32 [rows] (ties: lowest "
           "id) and argmax_logprob float32 [rows], both reduced on the device, hidden {layer: float32 "
           "[tokens, hidden_size]}.")
      .def("warm_up", &runner::ModelRunner::warm_up, py::call_guard<py::gil_scoped_release>(),
           "Launches every kernel variant this runner's steps use once, on throwaway tokens (so "
           "no kernel is compiled inside a request); returns the seconds it took.")
      .def("truncate", &runner::ModelRunner::truncate, py::call_guard<py::gil_scoped_release>(), py::arg("request_id"), py::arg("num_tokens"))
      .def("free", &runner::ModelRunner::free, py::call_guard<py::gil_scoped_release>(), py::arg("request_id"))
      .def("claim_prefix", &runner::ModelRunner::claim_prefix, py::call_guard<py::gil_scoped_release>(),
           py::arg("request_id"), py::arg("tokens"), py::arg("max_tokens"),
           "A new request starts from the longest cached prefix of tokens (whole blocks, at most "
           "max_tokens and len - 1): returns that length (0: none, nothing created).")
      .def("reset_prefix_cache", &runner::ModelRunner::reset_prefix_cache, py::call_guard<py::gil_scoped_release>(),
           "Evicts every cached block no request uses; returns how many.")
      .def("unclaim_prefix", &runner::ModelRunner::unclaim_prefix, py::call_guard<py::gil_scoped_release>(),
           py::arg("request_id"),
           "Undoes a claim_prefix of a request no step has run for: frees it and uncounts the claim.")
      .def("prefix_cache_stats", [](const runner::ModelRunner& r) {
             runner::ModelRunner::PrefixCacheStats s;
             {
               py::gil_scoped_release release;  // the runner's lock waits for a running step
               s = r.prefix_cache_stats();
             }
             py::dict d;
             d["enabled"] = s.enabled;
             d["queries"] = s.queries;
             d["hits"] = s.hits;
             d["cached_blocks"] = s.cached_blocks;
             return d;
           }, "Prefix caching: enabled, queries and hits (prompt tokens), cached_blocks per group.")
      .def("has_request", &runner::ModelRunner::has_request, py::call_guard<py::gil_scoped_release>(), py::arg("request_id"))
      .def("num_cached_tokens", &runner::ModelRunner::num_cached_tokens, py::call_guard<py::gil_scoped_release>(), py::arg("request_id"))
      .def("num_blocks_needed", &runner::ModelRunner::num_blocks_needed, py::call_guard<py::gil_scoped_release>(), py::arg("request_id"),
           py::arg("num_computed_tokens"), py::arg("num_new_tokens"), py::arg("num_committed_tokens") = -1,
           "New KV blocks per group a step would take (upper bound: window frees not subtracted).")
      .def("num_free_blocks", &runner::ModelRunner::num_free_blocks, py::call_guard<py::gil_scoped_release>(), "Free KV blocks per group.")
      .def_property_readonly("config", &runner::ModelRunner::config, py::return_value_policy::copy)
      .def_property_readonly("kv_config", &runner::ModelRunner::kv_config, py::return_value_policy::copy)
      .def_property_readonly("max_model_len", &runner::ModelRunner::max_model_len)
      .def_property_readonly("weight_bytes", &runner::ModelRunner::weight_bytes)
      .def_property_readonly("num_logit_columns", &runner::ModelRunner::num_logit_columns)
      .def("set_extra_logit_tokens", &runner::ModelRunner::set_extra_logit_tokens,
           py::call_guard<py::gil_scoped_release>(), py::arg("ids"),
           "With logit_token_ids: ids whose logits later steps add after those columns.")
      .def_property_readonly("extra_logit_tokens", &runner::ModelRunner::extra_logit_tokens)
      .def_property_readonly("logit_token_ids", [](const runner::ModelRunner& r) { return r.options().logit_token_ids; })
      .def("attention_explain", [](const runner::ModelRunner& r) { return r.attention().explain(); })
      .def_property_readonly("attention_backends", [](const runner::ModelRunner& r) {
        std::vector<std::string> names;
        for (const auto& g : r.attention().attention_groups) names.push_back(g.backend->name());
        return names;
      });

  m.def(
      "check_model_file",
      [](const std::string& path) {
        py::gil_scoped_release release;
        const model::GgufFile file = model::open_model_file(path);
        const model::ModelConfig config = model::config_from_gguf(file);
        runner::check_loadable(file, config);
        if (!config.is_dflash()) tokenizer::Tokenizer::from_gguf(file);  // a drafter uses the target's
      },
      py::arg("path"),
      "Checks a GGUF file or a Hugging Face directory as a ModelRunner does when it loads it (configuration, every tensor's "
      "presence, shape and weight format, the tokenizer) without touching a device: FormatError "
      "or UnsupportedError naming what is wrong.");

  // Held with the GIL: each call takes the runner's lock for a few microseconds (a scheduler
  // builds its step between forwards, never during one), and giving the GIL up per call would
  // let another thread keep it for a switch interval.
  py::class_<runner::StepBlockBudget>(m, "StepBlockBudget",
                                      "The KV blocks per group one scheduler step reserves against the "
                                      "runner's free blocks.")
      .def(py::init<const runner::ModelRunner&>(), py::arg("runner"), py::keep_alive<1, 2>())
      .def("refresh", &runner::StepBlockBudget::refresh, "Reads the free blocks again.")
      .def("overdrawn", &runner::StepBlockBudget::overdrawn,
           "More reserved than free in some group (a prefix claim took blocks the step counted on).")
      .def("take", &runner::StepBlockBudget::take, py::arg("request_id"), py::arg("num_computed_tokens"),
           py::arg("num_new_tokens"),
           "Reserves the blocks of the next num_new_tokens tokens; False (nothing reserved) if they do not fit.")
      .def("largest_chunk", &runner::StepBlockBudget::largest_chunk, py::arg("request_id"),
           py::arg("num_computed_tokens"), py::arg("num_new_tokens"),
           "The most of the next num_new_tokens tokens whose blocks fit (0 if none); reserves nothing.")
      .def_property_readonly("free", &runner::StepBlockBudget::free)
      .def_property_readonly("reserved", &runner::StepBlockBudget::reserved);

  py::class_<sampling::Generator, std::shared_ptr<sampling::Generator>>(m, "SamplingGenerator",
                                  "A request's random numbers: a function of its seed and of the position (and "
                                  "stream) they decide. coupled=True (seeded requests): drafts are verified by "
                                  "matching the target's own draw, so the output is plain decoding's for the seed.")
      .def(py::init<uint64_t, bool>(), py::arg("seed"), py::arg("coupled") = true)
      .def_property_readonly("seed", &sampling::Generator::seed)
      .def_property_readonly("coupled", &sampling::Generator::coupled)
      .def("uniform", [](const sampling::Generator& g, int64_t position, uint64_t stream, uint64_t index) {
             SPECDEC_CHECK(stream >= 1 && stream <= 3, "stream", stream, "1 (token), 2 (accept) or 3 (residual)");
             return g.uniform(position, static_cast<sampling::Stream>(stream), index);
           },
           py::arg("position"), py::arg("stream") = 1, py::arg("index") = 0);
  m.def("sample_token",
        [](const py::array_t<float, py::array::c_style | py::array::forcecast>& logits,
           double temperature, int top_k, double top_p, double min_p, const sampling::Generator& gen,
           int64_t position) {
          return sampling::sample(row(logits), logits.shape(0), sampling::SamplingParams::make(temperature, top_k, top_p, min_p),
                                  gen, position);
        },
        py::arg("logits"), py::arg("temperature"), py::arg("top_k"), py::arg("top_p"),
        py::arg("min_p"), py::arg("generator"), py::arg("position"),
        "The token drawn at `position` (its index in the sequence) from the logits row.");
  m.def("sampling_probs",
        [](const py::array_t<float, py::array::c_style | py::array::forcecast>& logits,
           double temperature, int top_k, double top_p, double min_p) {
          return sampling::sampling_probs(row(logits), logits.shape(0), sampling::SamplingParams::make(temperature, top_k, top_p, min_p));
        },
        py::arg("logits"), py::arg("temperature") = 1.0, py::arg("top_k") = 0,
        py::arg("top_p") = 1.0, py::arg("min_p") = 0.0);
  m.def("apply_token_bitmask",
        [](py::array logits, const std::vector<int64_t>& rows, py::array masks) {
          SPECDEC_CHECK(py::isinstance<py::array_t<float>>(logits) && logits.ndim() == 2 && logits.writeable() &&
                            (logits.flags() & py::array::c_style),
                        "logits", std::string(py::str(logits.dtype())) + " array of " + std::to_string(logits.ndim()) + " dims",
                        "a writable C-contiguous float32 array [rows, vocab]");
          SPECDEC_CHECK(py::isinstance<py::array_t<int32_t>>(masks) && masks.ndim() == 2 &&
                            (masks.flags() & py::array::c_style),
                        "masks", std::string(py::str(masks.dtype())) + " array of " + std::to_string(masks.ndim()) + " dims",
                        "a C-contiguous int32 array [len(rows), words]");
          SPECDEC_CHECK(masks.shape(0) == static_cast<py::ssize_t>(rows.size()), "masks rows", masks.shape(0),
                        str_cat(rows.size(), " (one mask per row)"));
          const int64_t vocab = logits.shape(1), words = masks.shape(1);
          auto* base = static_cast<float*>(logits.mutable_data());
          const auto* m = static_cast<const int32_t*>(masks.data());
          for (size_t j = 0; j < rows.size(); ++j) {
            SPECDEC_CHECK(rows[j] >= 0 && rows[j] < logits.shape(0), "rows", rows[j],
                          str_cat("a row index in [0, ", logits.shape(0), ")"));
          }
          py::gil_scoped_release release;
          for (size_t j = 0; j < rows.size(); ++j)
            sampling::apply_token_bitmask(base + rows[j] * vocab, vocab, m + static_cast<int64_t>(j) * words, words);
        },
        py::arg("logits"), py::arg("rows"), py::arg("masks"),
        "Structured outputs: logits[rows[j], t] = -inf for every token t whose bit is clear in masks[j] "
        "(bit t % 32 of word t // 32; llguidance's layout), in place.");
  m.def("token_logprob",
        [](const py::array_t<float, py::array::c_style | py::array::forcecast>& logits, int32_t id) {
          return sampling::token_logprob(row(logits), logits.shape(0), id);
        },
        py::arg("logits"), py::arg("id"), "log_softmax(logits)[id] from raw logits (token_logprobs' of_ids[0]).");
  m.def("token_logprobs",
        [](const py::array_t<float, py::array::c_style | py::array::forcecast>& logits, int n,
           const std::vector<int32_t>& ids) {
          const sampling::Logprobs lp = sampling::logprobs(row(logits), logits.shape(0), n, ids);
          return py::make_tuple(lp.top, lp.of_ids, lp.ranks_of_ids);
        },
        py::arg("logits"), py::arg("n"), py::arg("ids"),
        "(top n (id, logprob), logprobs of ids, ranks of ids) from raw logits.");
}
