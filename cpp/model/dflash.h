// DFlash drafters as z-lab publishes them: a directory with config.json (a Qwen3 config plus
// dflash_config: target_layer_ids, mask_token_id, block_size) and model.safetensors (layers.N.*,
// norm, fc, hidden_norm; no embedding, no output head). They are read into the GGUF form the
// runner loads, in memory: architecture qwen3 (neox RoPE, QK norm), tensors renamed to llama.cpp's
// names, dflash_fc / dflash_hidden_norm, and the keys qwen3.dflash.* (ModelConfig::is_dflash).
// As for other Hugging Face directories (model/hf_checkpoint.h), the tensors are views into the
// mapped model.safetensors (GgufFile::from_views): no weight is copied.
#pragma once

#include <string>

#include "model/gguf.h"

namespace specdec::model {

// Whether `path` is a directory whose config.json has a dflash_config object.
bool is_dflash_checkpoint(const std::string& path);

// The checkpoint as a GGUF file. ConfigError / FormatError naming the field or tensor for a bad
// checkpoint; UnsupportedError for what the runner cannot run yet (sliding-window or causal
// drafter layers, rope scaling, an output multiplier or logit softcap, another activation).
// with_matrices = false leaves the matrices out (a config's worth: the norms, which say what the
// layers have); load_model_config reads it so.
GgufFile dflash_to_gguf(const std::string& dir, bool with_matrices = true);

// GgufFile::open for a GGUF path, dflash_to_gguf for a DFlash checkpoint directory, hf_to_gguf
// (model/hf_checkpoint.h) for another Hugging Face directory.
GgufFile open_model_file(const std::string& path);

}  // namespace specdec::model
