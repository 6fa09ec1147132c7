// Model-level choices that kernels take as parameters: the RoPE pairing and the gated-MLP
// activation. They live below both model/ (ModelConfig holds them) and ops/ (the kernels take
// them), so that ops never includes the model layer; model/config.h aliases them into
// specdec::model.
#pragma once

namespace specdec {

enum class RopeType { kNone, kNorm, kNeox };      // NORM: adjacent pairs; NEOX: halves
enum class Activation { kSilu, kGeluTanh };       // gate activation of the gated MLP

const char* rope_type_name(RopeType type);        // "none", "norm", "neox"
const char* activation_name(Activation act);      // "silu", "gelu_tanh"

}  // namespace specdec
