// Hugging Face model directories: config.json, model.safetensors (or shards named by
// model.safetensors.index.json; F32, F16, BF16), tokenizer.json, tokenizer_config.json and
// generation_config.json. They are read into the GGUF form the runner and the tokenizer load,
// in memory and without copying the weights: the metadata llama.cpp's converter would write
// and the tensors under llama.cpp's names, viewing the mapped safetensors files. Where llama.cpp's
// converter changes bytes, this does the same: Llama q/k rows go from rotate-half (NEOX) order to
// the interleaved order of NORM RoPE, and Gemma 3's (1 + w) norms are stored as w + 1. So a
// directory and the GGUF file converted from it run the same forward pass.
//
// Supported model types: llama, mistral, qwen2, qwen3, gemma3_text (and gemma3's text_config),
// phi3 (fused qkv_proj / gate_up_proj, LongRoPE's factors as llama.cpp's two factor tensors).
// DFlash drafter directories have their own reader (model/dflash.h).
#pragma once

#include <string>

#include "model/gguf.h"

namespace specdec::model {

// Whether `path` is a directory with config.json that is not a DFlash drafter's.
bool is_hf_checkpoint(const std::string& path);

// The directory as a GGUF file. with_tensors = false reads only the JSON files (the model's keys
// and the tokenizer's): a directory without weights still has a tokenizer. ConfigError naming the
// file, field and value for a bad or missing file; UnsupportedError for a model type, tokenizer or
// weight dtype that does not run here.
GgufFile hf_to_gguf(const std::string& dir, bool with_tensors = true);

}  // namespace specdec::model
