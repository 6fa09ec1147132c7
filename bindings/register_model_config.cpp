// ModelConfig: built from a GGUF file or a Hugging Face config.json.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <nlohmann/json.hpp>

#include "common/dtype.h"
#include "common/errors.h"
#include "common/json.h"
#include "model/config.h"

namespace py = pybind11;
using namespace specdec;
using namespace specdec::model;

void register_model_config(py::module_& m) {
  py::class_<ModelConfig>(m, "ModelConfig",
                          "A model's architecture, sizes, RoPE, norms and per-layer attention, "
                          "from a GGUF file or a Hugging Face config.json.")
      .def_readonly("architecture", &ModelConfig::architecture)
      .def_readonly("name", &ModelConfig::name)
      .def_readonly("source_format", &ModelConfig::source_format)
      .def_readonly("num_layers", &ModelConfig::num_layers)
      .def_readonly("hidden_size", &ModelConfig::hidden_size)
      .def_readonly("intermediate_size", &ModelConfig::intermediate_size)
      .def_readonly("num_q_heads", &ModelConfig::num_q_heads)
      .def_readonly("num_kv_heads", &ModelConfig::num_kv_heads)
      .def_readonly("head_size", &ModelConfig::head_size)
      .def_readonly("head_size_v", &ModelConfig::head_size_v)
      .def_readonly("vocab_size", &ModelConfig::vocab_size)
      .def_readonly("context_length", &ModelConfig::context_length)
      .def_readonly("norm_eps", &ModelConfig::norm_eps)
      .def_readonly("qkv_bias", &ModelConfig::qkv_bias)
      .def_readonly("qk_norm", &ModelConfig::qk_norm)
      .def_property_readonly("is_dflash", &ModelConfig::is_dflash)
      .def_readonly("dflash_target_layers", &ModelConfig::dflash_target_layers)
      .def_readonly("dflash_mask_token_id", &ModelConfig::dflash_mask_token_id)
      .def_readonly("dflash_block_size", &ModelConfig::dflash_block_size)
      .def_readonly("tied_embeddings", &ModelConfig::tied_embeddings)
      .def_readonly("rope_base", &ModelConfig::rope_base)
      .def_property_readonly("rope_type",
                             [](const ModelConfig& c) { return rope_type_name(c.rope_type); })
      .def_readonly("rope_scaling_type", &ModelConfig::rope_scaling_type,
                    "'' (none), 'linear', 'yarn', 'llama3' or 'longrope'")
      .def_readonly("rope_scaling_factor", &ModelConfig::rope_scaling_factor)
      .def_property_readonly("num_sliding_layers", &ModelConfig::num_sliding_layers)
      .def("layer_kv_specs",
           [](const ModelConfig& c, int block_size, const std::string& dtype, int64_t max_model_len) {
             return c.layer_kv_specs(block_size, parse_dtype(dtype), max_model_len);
           },
           py::arg("block_size") = 16, py::arg("dtype") = "f16", py::arg("max_model_len") = 0,
           "Every layer's KV-cache spec, named layers.<i>, as plan_kv_cache takes them; with "
           "max_model_len, windows that cover it are declared full attention.")
      .def("to_json", [](const ModelConfig& c) { return c.to_json().dump(); },
           "Every field as a JSON string.")
      .def("__repr__", [](const ModelConfig& c) {
        return "ModelConfig(" + c.architecture + ", " + std::to_string(c.num_layers) +
               " layers, hidden " + std::to_string(c.hidden_size) + ", heads " +
               std::to_string(c.num_q_heads) + "/" + std::to_string(c.num_kv_heads) + " x " +
               std::to_string(c.head_size) + ")";
      });
  m.def("load_model_config", &load_model_config, py::arg("path"),
        "ModelConfig of a GGUF file, a config.json, or a directory holding config.json.");
  m.def("model_config_from_hf_json",
        [](const std::string& text, const std::string& source) {
          nlohmann::json j;
          try {
            j = parse_json(text);
          } catch (const FormatError& e) {
            throw FormatError(str_cat(source, ": not valid JSON: ", e.what()));
          }
          return config_from_hf_json(j, source);
        },
        py::arg("text"), py::arg("source") = "config.json");
  m.def("supported_architectures", &supported_architectures);
}
