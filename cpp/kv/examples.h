// Built-in example models: the per-layer KV specs of real architectures, for the planner's
// CLI (`specdec kv-plan --example NAME`), tests and benchmarks, before model files are read.
#pragma once

#include <string>
#include <vector>

#include "kv/spec.h"

namespace specdec::kv {

struct ExampleModel {
  std::string name;
  std::string description;
  int default_max_model_len = 0;
  int num_q_heads = 0;  // query heads per attention layer (what attention backends need)
};

std::vector<ExampleModel> example_models();

// Layers of example `name` (ConfigError listing the names for an unknown one).
std::vector<LayerKvSpec> example_model_layers(const std::string& name, int block_size = 16,
                                              DType dtype = DType::kF16);

}  // namespace specdec::kv
