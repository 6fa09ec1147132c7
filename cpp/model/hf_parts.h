// The parts of reading a Hugging Face model directory (model/hf_checkpoint.h): its JSON files,
// its safetensors weights under llama.cpp's tensor names, and its tokenizer as GGUF metadata.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/json.h"
#include "model/config.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/safetensors.h"

namespace specdec::model {

// The GGUF type of a safetensors tensor: F32, F16 or BF16; UnsupportedError naming `source`,
// the tensor and its dtype otherwise.
GgmlType ggml_type_of(const SafetensorsTensor& t, const std::string& source);

// A directory's weights as GGUF tensors (llama.cpp's names and layout) viewing the mapped
// safetensors files that `owner` keeps alive; only the tensors whose bytes change are copied:
// Llama's q/k rows (rotate-half order to llama.cpp's interleaved order) and Gemma 3's norms
// (w + 1, stored F32, as llama.cpp's converter writes them). RoPE factors from config.json are
// added as F32 tensors: Llama 3's rope_freqs, Phi-3's rope_factors_long / rope_factors_short.
struct HfTensors {
  std::vector<GgufTensor> tensors;
  std::shared_ptr<const void> owner;
};

// model.safetensors, or the shards that model.safetensors.index.json names. ConfigError when
// the directory has neither; FormatError for a malformed file or index; UnsupportedError for a
// tensor stored other than as F32, F16 or BF16.
HfTensors read_hf_tensors(const std::filesystem::path& dir, const ModelConfig& config);

// FormatError naming config.json's vocab_size (or hidden_size) unless the directory's embedding
// tensor is [vocab_size, hidden_size]; nothing when the directory has no weights.
void check_hf_embedding(const std::filesystem::path& dir, const ModelConfig& config);

// tokenizer.json (byte-level BPE or SentencePiece-style BPE), tokenizer_config.json (special
// tokens, add_bos_token / add_eos_token, chat template) and generation_config.json
// (eos_token_id: one id or a list) as tokenizer.* GGUF keys; the vocabulary is padded with
// [PAD<id>] tokens up to `vocab_size` (the embedding's rows), as llama.cpp's converter does.
void add_hf_tokenizer(const std::filesystem::path& dir, int64_t vocab_size, GgufWriter& w);

}  // namespace specdec::model
