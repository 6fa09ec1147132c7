#include "common/model_types.h"

namespace specdec {

const char* rope_type_name(RopeType type) {
  switch (type) {
    case RopeType::kNone: return "none";
    case RopeType::kNorm: return "norm";
    case RopeType::kNeox: return "neox";
  }
  return "unknown";
}

const char* activation_name(Activation act) {
  return act == Activation::kSilu ? "silu" : "gelu_tanh";
}

}  // namespace specdec
