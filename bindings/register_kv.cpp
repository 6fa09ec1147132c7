// KV-cache specs, planner, layouts and device allocation.
#include <pybind11/numpy.h>
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <climits>
#include <cstdint>
#include <optional>

#include "common/errors.h"
#include "kv/allocator.h"
#include "kv/cache_ops.h"
#include "kv/config_json.h"
#include "kv/examples.h"
#include "kv/planner.h"

namespace py = pybind11;
using namespace specdec;
using namespace specdec::kv;

namespace {

// Python ints arrive as int64 and are range-checked here, so an out-of-range size is a
// ValueError naming the field rather than a binding TypeError.
int as_int(int64_t value, const char* field) {
  SPECDEC_CHECK(value >= INT32_MIN && value <= INT32_MAX, field, value, "must fit in 32 bits");
  return static_cast<int>(value);
}

int head_size_v_arg(std::optional<int64_t> v) {
  if (!v.has_value()) return -1;
  SPECDEC_CHECK(*v >= 1, "head_size_v", *v, "must be >= 1 (or None for head_size)");
  return as_int(*v, "head_size_v");
}

void bind_specs(py::module_& m) {
  py::enum_<KvSpecKind>(m, "KvSpecKind")
      .value("FULL_ATTENTION", KvSpecKind::kFullAttention)
      .value("SLIDING_WINDOW", KvSpecKind::kSlidingWindow)
      .value("CHUNKED_LOCAL", KvSpecKind::kChunkedLocal)
      .value("MLA", KvSpecKind::kMla);

  py::class_<KvCacheSpec>(m, "KvCacheSpec", "The KV-cache spec of one attention layer.")
      .def_property_readonly("kind", [](const KvCacheSpec& s) { return kind_name(s.kind); })
      .def_readonly("block_size", &KvCacheSpec::block_size)
      .def_readonly("num_kv_heads", &KvCacheSpec::num_kv_heads)
      .def_readonly("head_size", &KvCacheSpec::head_size)
      .def_readonly("head_size_v", &KvCacheSpec::head_size_v)
      .def_property_readonly("dtype", [](const KvCacheSpec& s) { return dtype_name(s.dtype); })
      .def_readonly("sliding_window", &KvCacheSpec::sliding_window)
      .def_readonly("attention_chunk_size", &KvCacheSpec::attention_chunk_size)
      .def_readonly("kv_lora_rank", &KvCacheSpec::kv_lora_rank)
      .def_readonly("qk_rope_head_dim", &KvCacheSpec::qk_rope_head_dim)
      .def_property_readonly("page_size_bytes", &KvCacheSpec::page_size_bytes)
      .def_property_readonly("bytes_per_token", &KvCacheSpec::bytes_per_token)
      .def("max_memory_usage_bytes", &KvCacheSpec::max_memory_usage_bytes, py::arg("max_model_len"),
           py::arg("max_num_batched_tokens") = 2048,
           "Most bytes one request of max_model_len can hold in this layer.")
      .def("max_blocks_per_request", &KvCacheSpec::max_blocks_per_request, py::arg("max_model_len"),
           py::arg("max_num_batched_tokens") = 2048)
      .def("with_block_size", &KvCacheSpec::with_block_size, py::arg("block_size"))
      .def(py::self == py::self)
      .def("__hash__", [](const KvCacheSpec& s) { return py::hash(py::str(s.to_string())); })
      .def("__repr__", &KvCacheSpec::to_string);

  m.def("FullAttentionSpec",
        [](int64_t block_size, int64_t num_kv_heads, int64_t head_size, const std::string& dtype, std::optional<int64_t> head_size_v) {
          return KvCacheSpec::full_attention(as_int(block_size, "block_size"), as_int(num_kv_heads, "num_kv_heads"),
                                             as_int(head_size, "head_size"), parse_dtype(dtype), head_size_v_arg(head_size_v));
        },
        py::arg("block_size"), py::arg("num_kv_heads"), py::arg("head_size"), py::arg("dtype") = "f16",
        py::arg("head_size_v") = py::none(), "Full attention: every token of the request stays cached.");
  m.def("SlidingWindowSpec",
        [](int64_t block_size, int64_t num_kv_heads, int64_t head_size, int64_t sliding_window, const std::string& dtype, std::optional<int64_t> head_size_v) {
          return KvCacheSpec::sliding(as_int(block_size, "block_size"), as_int(num_kv_heads, "num_kv_heads"),
                                      as_int(head_size, "head_size"), parse_dtype(dtype),
                                      as_int(sliding_window, "sliding_window"), head_size_v_arg(head_size_v));
        },
        py::arg("block_size"), py::arg("num_kv_heads"), py::arg("head_size"), py::arg("sliding_window"),
        py::arg("dtype") = "f16", py::arg("head_size_v") = py::none(),
        "Sliding-window attention: blocks that left the window are freed.");
  m.def("ChunkedLocalAttentionSpec",
        [](int64_t block_size, int64_t num_kv_heads, int64_t head_size, int64_t attention_chunk_size, const std::string& dtype, std::optional<int64_t> head_size_v) {
          return KvCacheSpec::chunked_local(as_int(block_size, "block_size"), as_int(num_kv_heads, "num_kv_heads"),
                                            as_int(head_size, "head_size"), parse_dtype(dtype),
                                            as_int(attention_chunk_size, "attention_chunk_size"), head_size_v_arg(head_size_v));
        },
        py::arg("block_size"), py::arg("num_kv_heads"), py::arg("head_size"), py::arg("attention_chunk_size"),
        py::arg("dtype") = "f16", py::arg("head_size_v") = py::none(),
        "Chunked local attention: blocks of finished chunks are freed.");
  m.def("MLAAttentionSpec",
        [](int64_t block_size, int64_t kv_lora_rank, int64_t qk_rope_head_dim, const std::string& dtype) {
          return KvCacheSpec::mla(as_int(block_size, "block_size"), as_int(kv_lora_rank, "kv_lora_rank"),
                                  as_int(qk_rope_head_dim, "qk_rope_head_dim"), parse_dtype(dtype));
        },
        py::arg("block_size"), py::arg("kv_lora_rank"), py::arg("qk_rope_head_dim"), py::arg("dtype") = "f16",
        "MLA: one latent row of kv_lora_rank + qk_rope_head_dim per token.");

  py::class_<LayerKvSpec>(m, "LayerKvSpec", "One layer's name, KV spec and optional KV-sharing target.")
      .def(py::init([](std::string name, KvCacheSpec spec, std::optional<std::string> target) {
             return LayerKvSpec{std::move(name), spec, target.value_or("")};
           }),
           py::arg("layer_name"), py::arg("spec"), py::arg("kv_sharing_target") = py::none())
      .def_readonly("layer_name", &LayerKvSpec::layer_name)
      .def_readonly("spec", &LayerKvSpec::spec)
      .def_property_readonly("kv_sharing_target", [](const LayerKvSpec& l) -> py::object {
        if (l.kv_sharing_target.empty()) return py::none();
        return py::str(l.kv_sharing_target);
      })
      .def("__repr__", [](const LayerKvSpec& l) {
        return str_cat("LayerKvSpec('", l.layer_name, "', ", l.spec.to_string(),
                       l.kv_sharing_target.empty() ? "" : ", kv_sharing_target='" + l.kv_sharing_target + "'", ")");
      });
}

void bind_config(py::module_& m) {
  py::class_<KvCacheGroup>(m, "KvCacheGroup")
      .def_readonly("spec", &KvCacheGroup::spec)
      .def_readonly("layer_names", &KvCacheGroup::layer_names)
      .def_readonly("layer_specs", &KvCacheGroup::layer_specs)
      .def_readonly("sharing_layer_names", &KvCacheGroup::sharing_layer_names)
      .def_readonly("num_blocks", &KvCacheGroup::num_blocks)
      .def_readonly("max_blocks_per_request", &KvCacheGroup::max_blocks_per_request)
      .def_readonly("bytes_per_block", &KvCacheGroup::bytes_per_block)
      .def_property_readonly("usable_blocks", &KvCacheGroup::usable_blocks)
      .def_property_readonly("max_concurrent_requests", &KvCacheGroup::max_concurrent_requests)
      .def_property_readonly("token_capacity", &KvCacheGroup::token_capacity);
  py::class_<KvCacheTensor>(m, "KvCacheTensor")
      .def_readonly("size_bytes", &KvCacheTensor::size_bytes)
      .def_readonly("shared_by", &KvCacheTensor::shared_by)
      .def_readonly("group_id", &KvCacheTensor::group_id);
  py::class_<KvCacheConfig>(m, "KvCacheConfig", "A KV-cache plan: groups, tensors, blocks.")
      .def_readonly("groups", &KvCacheConfig::groups)
      .def_readonly("tensors", &KvCacheConfig::tensors)
      .def_readonly("kv_sharing", &KvCacheConfig::kv_sharing)
      .def_readonly("max_model_len", &KvCacheConfig::max_model_len)
      .def_readonly("max_num_batched_tokens", &KvCacheConfig::max_num_batched_tokens)
      .def_readonly("budget_bytes", &KvCacheConfig::budget_bytes)
      .def_readonly("model_name", &KvCacheConfig::model_name)
      .def_readonly("disable_hybrid_kv_cache_manager", &KvCacheConfig::disable_hybrid_kv_cache_manager)
      .def_property_readonly("total_bytes", &KvCacheConfig::total_bytes)
      .def_property_readonly("max_concurrent_requests", &KvCacheConfig::max_concurrent_requests)
      .def("group_of", &KvCacheConfig::group_of, py::arg("layer_name"))
      .def("tensor_of", &KvCacheConfig::tensor_of, py::arg("layer_name"))
      .def("layer_specs", &KvCacheConfig::layer_specs)
      .def("to_json", [](const KvCacheConfig& c) { return to_json(c).dump(); });
  py::class_<SpecDecodeKvPlan>(m, "SpecDecodeKvPlan", "Target and drafter KV plans from one budget.")
      .def_readonly("target", &SpecDecodeKvPlan::target)
      .def_readonly("drafter", &SpecDecodeKvPlan::drafter)
      .def_readonly("target_budget_bytes", &SpecDecodeKvPlan::target_budget_bytes)
      .def_readonly("drafter_budget_bytes", &SpecDecodeKvPlan::drafter_budget_bytes)
      .def_readonly("split", &SpecDecodeKvPlan::split)
      .def("to_json", [](const SpecDecodeKvPlan& p) { return to_json(p).dump(); });
}

PlannerOptions options(int64_t max_num_batched_tokens, int64_t num_blocks_override, std::string name,
                       bool disable_hybrid = false) {
  return PlannerOptions{max_num_batched_tokens, num_blocks_override, std::move(name), disable_hybrid};
}

void bind_planner(py::module_& m) {
  m.def("plan_kv_cache",
        [](const std::vector<LayerKvSpec>& layers, int64_t budget, int64_t max_model_len,
           int64_t max_num_batched_tokens, int64_t num_blocks_override, const std::string& name, bool disable_hybrid) {
          return plan_kv_cache(layers, budget, max_model_len,
                               options(max_num_batched_tokens, num_blocks_override, name, disable_hybrid));
        },
        py::arg("layers"), py::arg("kv_cache_memory_bytes"), py::arg("max_model_len"),
        py::arg("max_num_batched_tokens") = 2048, py::arg("num_blocks_override") = 0,
        py::arg("model_name") = "", py::arg("disable_hybrid_kv_cache_manager") = false);
  m.def("plan_target_and_drafter",
        [](const std::vector<LayerKvSpec>& target, const std::vector<LayerKvSpec>& drafter, int64_t budget,
           int64_t max_model_len, std::optional<double> drafter_fraction, int64_t max_num_batched_tokens,
           const std::string& target_name, const std::string& drafter_name, bool target_unified, bool drafter_unified) {
          return plan_target_and_drafter(target, drafter, budget, max_model_len, drafter_fraction.value_or(-1.0),
                                         options(max_num_batched_tokens, 0, target_name, target_unified),
                                         options(max_num_batched_tokens, 0, drafter_name, drafter_unified));
        },
        py::arg("target_layers"), py::arg("drafter_layers"), py::arg("kv_cache_memory_bytes"),
        py::arg("max_model_len"), py::arg("drafter_fraction") = py::none(),
        py::arg("max_num_batched_tokens") = 2048, py::arg("target_name") = "", py::arg("drafter_name") = "",
        py::arg("target_disable_hybrid_kv_cache_manager") = false,
        py::arg("drafter_disable_hybrid_kv_cache_manager") = false);
  m.def("min_kv_cache_bytes",
        [](const std::vector<LayerKvSpec>& layers, int64_t max_model_len, int64_t max_num_batched_tokens,
           bool disable_hybrid) {
          return min_budget_bytes(layers, max_model_len, options(max_num_batched_tokens, 0, "", disable_hybrid));
        },
        py::arg("layers"), py::arg("max_model_len"), py::arg("max_num_batched_tokens") = 2048,
        py::arg("disable_hybrid_kv_cache_manager") = false);
  m.def("max_model_len_for_budget",
        [](const std::vector<LayerKvSpec>& layers, int64_t budget, int64_t limit, int64_t max_num_batched_tokens,
           bool disable_hybrid) {
          return max_model_len_for_budget(layers, budget, limit, options(max_num_batched_tokens, 0, "", disable_hybrid));
        },
        py::arg("layers"), py::arg("kv_cache_memory_bytes"), py::arg("limit"), py::arg("max_num_batched_tokens") = 2048,
        py::arg("disable_hybrid_kv_cache_manager") = false);
  m.def("example_models", [] {
    py::list out;
    for (const auto& e : example_models()) {
      py::dict d;
      d["name"] = e.name;
      d["description"] = e.description;
      d["default_max_model_len"] = e.default_max_model_len;
      d["num_q_heads"] = e.num_q_heads;
      out.append(d);
    }
    return out;
  });
  m.def("example_model_layers",
        [](const std::string& name, int block_size, const std::string& dtype) {
          return example_model_layers(name, block_size, parse_dtype(dtype));
        },
        py::arg("name"), py::arg("block_size") = 16, py::arg("dtype") = "f16");
}

}  // namespace

void register_kv_views(py::module_& m);

void register_kv(py::module_& m) {
  bind_specs(m);
  bind_config(m);
  bind_planner(m);
  register_kv_views(m);
}
