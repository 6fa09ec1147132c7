// Attention: backends and their capabilities, the selector, attention groups, metadata.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "attention/groups.h"
#include "attention/metadata.h"
#include "attention/registry.h"
#include "attention/selector.h"
#include "common/errors.h"
#include "kv/blocks.h"

namespace py = pybind11;
using namespace specdec;
using namespace specdec::attn;

namespace {

std::vector<std::string> dtype_names(const std::vector<DType>& dtypes) {
  std::vector<std::string> out;
  for (DType d : dtypes) out.push_back(dtype_name(d));
  return out;
}

void bind_requirements(py::module_& m) {
  py::class_<AttentionRequirements>(m, "AttentionRequirements", "What one attention layer needs from a backend.")
      .def(py::init([](int head_size, int num_q_heads, int num_kv_heads, std::optional<int> head_size_v,
                       const std::string& kv_cache_dtype, int block_size, bool use_mla, bool use_non_causal,
                       bool use_sliding_window, bool use_chunked_local, bool use_softcap, bool use_sinks,
                       std::optional<std::string> required_layout) {
             AttentionRequirements r;
             r.head_size = head_size;
             r.head_size_v = head_size_v.value_or(head_size);
             r.num_q_heads = num_q_heads;
             r.num_kv_heads = num_kv_heads;
             r.kv_cache_dtype = parse_dtype(kv_cache_dtype, "kv_cache_dtype");
             r.block_size = block_size;
             r.use_mla = use_mla;
             r.use_non_causal = use_non_causal;
             r.use_sliding_window = use_sliding_window;
             r.use_chunked_local = use_chunked_local;
             r.use_softcap = use_softcap;
             r.use_sinks = use_sinks;
             if (required_layout) r.required_layout = kv::parse_layout(*required_layout);
             return r;
           }),
           py::arg("head_size"), py::arg("num_q_heads") = 1, py::arg("num_kv_heads") = 1,
           py::arg("head_size_v") = py::none(), py::arg("kv_cache_dtype") = "f16", py::arg("block_size") = 16,
           py::arg("use_mla") = false, py::arg("use_non_causal") = false, py::arg("use_sliding_window") = false,
           py::arg("use_chunked_local") = false, py::arg("use_softcap") = false, py::arg("use_sinks") = false,
           py::arg("required_layout") = py::none())
      .def_static("from_spec", &AttentionRequirements::from_spec, py::arg("spec"), py::arg("num_q_heads"),
                  py::arg("use_non_causal") = false, py::arg("use_softcap") = false, py::arg("use_sinks") = false)
      .def_readonly("head_size", &AttentionRequirements::head_size)
      .def_readonly("head_size_v", &AttentionRequirements::head_size_v)
      .def_readonly("num_q_heads", &AttentionRequirements::num_q_heads)
      .def_readonly("num_kv_heads", &AttentionRequirements::num_kv_heads)
      .def_readonly("block_size", &AttentionRequirements::block_size)
      .def_readonly("use_mla", &AttentionRequirements::use_mla)
      .def_readonly("use_non_causal", &AttentionRequirements::use_non_causal)
      .def_readonly("use_sliding_window", &AttentionRequirements::use_sliding_window)
      .def_readonly("use_chunked_local", &AttentionRequirements::use_chunked_local)
      .def("__repr__", [](const AttentionRequirements& r) { return "AttentionRequirements(" + r.to_string() + ")"; });
}

py::dict capabilities_dict(const AttentionBackend& b) {
  const BackendCapabilities& c = b.capabilities();
  py::dict d;
  d["name"] = c.name;
  d["description"] = c.description;
  d["kv_cache_dtypes"] = dtype_names(c.kv_cache_dtypes);
  d["head_sizes"] = c.head_sizes;
  d["max_head_size"] = c.max_head_size;
  d["block_size_multiple_of"] = c.block_size_multiple_of;
  d["max_block_size"] = c.max_block_size;
  std::vector<std::string> reads = {kv::layout_name(c.kv_layout)};
  for (kv::KvLayout l : c.also_reads) reads.push_back(kv::layout_name(l));
  d["reads_layouts"] = reads;
  d["mla"] = c.any_mla ? std::string("both") : (c.is_mla ? std::string("only") : std::string("no"));
  d["causal"] = c.causal;
  d["non_causal"] = c.non_causal;
  d["sliding_window"] = c.sliding_window;
  d["chunked_local"] = c.chunked_local;
  d["logit_softcap"] = c.logit_softcap;
  d["sinks"] = c.sinks;
  d["separate_head_size_v"] = c.separate_head_size_v;
  d["on_device"] = c.on_device;
  d["kv_layout"] = kv::layout_name(c.kv_layout);
  return d;
}

py::dict choice_dict(const BackendChoice& c) {
  py::dict d;
  d["backend"] = c.backend->name();
  d["requested"] = c.requested;
  py::list verdicts;
  for (const auto& v : c.verdicts) verdicts.append(py::make_tuple(v.backend->name(), v.reasons));
  d["verdicts"] = verdicts;
  d["explanation"] = c.explain();
  return d;
}

void bind_selection(py::module_& m) {
  m.def("attention_backends", [] {
    py::list out;
    for (const auto& b : all_backends()) out.append(capabilities_dict(*b));
    return out;
  }, "Every attention backend with its declared capabilities and KV layout.");
  m.def("attention_priority", [](const std::string& device_type) {
    std::vector<std::string> out;
    for (const auto* b : priority_list(device_type)) out.push_back(b->name());
    return out;
  }, py::arg("device_type") = "cpu");
  m.def("select_backend",
        [](const AttentionRequirements& r, std::optional<std::string> requested, const std::string& device_type) {
          return choice_dict(select_backend(r, requested.value_or(""), device_type));
        },
        py::arg("requirements"), py::arg("requested") = py::none(), py::arg("device_type") = "cpu",
        "Picks the backend for one layer: requested None/'auto' walks the device's priority list; a name "
        "(any case) is validated. Raises UnsupportedError listing every reason when nothing fits.");
  m.def("validate_backend", [](const std::string& name, const AttentionRequirements& r) {
    return get_backend(name).validate(r);
  }, py::arg("name"), py::arg("requirements"), "Every reason backend `name` cannot serve `requirements`.");
}

void bind_groups(py::module_& m) {
  py::class_<LayerAttentionInfo>(m, "LayerAttentionInfo")
      .def(py::init([](std::string name, int num_q_heads, bool non_causal, bool softcap, bool sinks) {
             return LayerAttentionInfo{std::move(name), num_q_heads, non_causal, softcap, sinks};
           }),
           py::arg("layer_name"), py::arg("num_q_heads"), py::arg("use_non_causal") = false,
           py::arg("use_softcap") = false, py::arg("use_sinks") = false)
      .def_readonly("layer_name", &LayerAttentionInfo::layer_name)
      .def_readonly("num_q_heads", &LayerAttentionInfo::num_q_heads);
  py::class_<AttentionGroup>(m, "AttentionGroup")
      .def_property_readonly("backend", [](const AttentionGroup& g) { return g.backend->name(); })
      .def_property_readonly("kv_layout", [](const AttentionGroup& g) { return kv::layout_name(g.backend->kv_layout_for(g.spec)); })
      .def_readonly("layer_names", &AttentionGroup::layer_names)
      .def_readonly("spec", &AttentionGroup::spec)
      .def_readonly("kv_cache_group_id", &AttentionGroup::kv_cache_group_id)
      .def_readonly("num_q_heads", &AttentionGroup::num_q_heads)
      .def_readonly("causal", &AttentionGroup::causal);
  py::class_<AttentionSetup>(m, "AttentionSetup", "Attention groups of a KV-cache plan, with each layer's backend.")
      .def_readonly("attention_groups", &AttentionSetup::attention_groups)
      .def_readonly("layer_to_kv_cache_group", &AttentionSetup::layer_to_kv_cache_group)
      .def_readonly("layer_to_attention_group", &AttentionSetup::layer_to_attention_group)
      .def_property_readonly("layouts", [](const AttentionSetup& s) {
        std::map<std::string, std::string> out;
        for (const auto& [layer, layout] : s.layouts) out[layer] = kv::layout_name(layout);
        return out;
      })
      .def("choice", [](const AttentionSetup& s, const std::string& layer) {
        auto it = s.choices.find(layer);
        SPECDEC_CHECK(it != s.choices.end(), "layer_name", "'" + layer + "'", "not a layer of this setup");
        return choice_dict(it->second);
      }, py::arg("layer_name"))
      .def("explain", &AttentionSetup::explain);
  m.def("initialize_attention",
        static_cast<AttentionSetup (*)(const kv::KvCacheConfig&, const std::vector<LayerAttentionInfo>&,
                                       const std::string&, const std::string&)>(&initialize_attention),
        py::arg("config"), py::arg("layers"),
        py::arg("attention_backend") = "", py::arg("device_type") = "cpu",
        "Chooses a backend per layer and groups layers into attention groups per KV-cache group.");
}

void bind_metadata(py::module_& m) {
  py::class_<CommonAttentionMetadata>(m, "CommonAttentionMetadata")
      .def(py::init<>())
      .def_readwrite("num_reqs", &CommonAttentionMetadata::num_reqs)
      .def_readwrite("num_actual_tokens", &CommonAttentionMetadata::num_actual_tokens)
      .def_readwrite("max_query_len", &CommonAttentionMetadata::max_query_len)
      .def_readwrite("max_seq_len", &CommonAttentionMetadata::max_seq_len)
      .def_readwrite("block_size", &CommonAttentionMetadata::block_size)
      .def_readwrite("max_blocks_per_req", &CommonAttentionMetadata::max_blocks_per_req)
      .def_readwrite("causal", &CommonAttentionMetadata::causal)
      .def_readwrite("query_start_loc", &CommonAttentionMetadata::query_start_loc)
      .def_readwrite("seq_lens", &CommonAttentionMetadata::seq_lens)
      .def_readwrite("num_computed_tokens", &CommonAttentionMetadata::num_computed_tokens)
      .def_readwrite("block_table", &CommonAttentionMetadata::block_table)
      .def_readwrite("slot_mapping", &CommonAttentionMetadata::slot_mapping)
      .def("validate", &CommonAttentionMetadata::validate);
  m.def("make_local_attention_virtual_batches", &make_local_attention_virtual_batches,
        py::arg("attention_chunk_size"), py::arg("common"));
  m.def("build_common_metadata",
        [](const kv::KvCacheManager& manager, int group_id, const std::vector<std::tuple<std::string, int64_t, int64_t>>& reqs,
           bool causal) {
          std::vector<ScheduledRequest> requests;
          for (const auto& [id, computed, fresh] : reqs) requests.push_back({id, computed, fresh});
          return build_common_metadata(manager, group_id, requests, causal);
        },
        py::arg("manager"), py::arg("group_id"), py::arg("requests"), py::arg("causal") = true,
        "Common metadata of one KV-cache group; requests = [(request_id, num_computed_tokens, num_new_tokens)].");
}

}  // namespace

void register_attention(py::module_& m) {
  bind_requirements(m);
  bind_selection(m);
  bind_groups(m);
  bind_metadata(m);
}
