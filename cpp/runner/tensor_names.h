// The GGUF tensors a model's forward reads, by architecture, with the shapes its ModelConfig
// implies: checked once at load so a wrong file fails with the tensor's name and both shapes,
// not with a bad read in the middle of a forward.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace specdec::model {
class GgufFile;
struct GgufTensor;
struct ModelConfig;
}  // namespace specdec::model

namespace specdec::runner {

struct TensorRef {
  std::string name;
  std::vector<int64_t> dims;  // GGUF order: ne[0] (input features, contiguous) first
  bool required = true;
};

// Names and shapes of layer `il`'s tensors ("blk.<il>.*") and of the global ones.
std::vector<TensorRef> layer_tensors(const model::ModelConfig& config, int il);
std::vector<TensorRef> global_tensors(const model::ModelConfig& config);

// Checks every required tensor exists with its shape, and every optional one that exists has
// its shape. FormatError naming the tensor, the shape found and the shape expected.
void check_model_tensors(const model::GgufFile& file, const model::ModelConfig& config);

// The tensor `ref` names, or nullptr when it is optional and absent (after check_model_tensors).
const model::GgufTensor* find(const model::GgufFile& file, const TensorRef& ref);

}  // namespace specdec::runner
