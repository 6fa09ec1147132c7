// The typed input and output of ModelRunner.step across the binding (register_step.cpp):
// specdec._core.StepRequest (runner::StepRequest itself) and specdec._core.StepOutput.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <vector>

#include "runner/model_runner.h"

namespace specdec::bindings {

// What Python sees of a runner::StepOutput: NumPy arrays that own the step's C++ vectors (moved
// into them, not copied) and the first logit row of every request.
struct StepResult {
  int64_t vocab_size = 0;
  std::vector<int64_t> logits_start;        // [num_requests + 1]
  pybind11::array_t<float> logits;          // [rows, vocab_size] (0 rows without return_logits)
  pybind11::array_t<int32_t> argmax;        // [rows]
  pybind11::array_t<float> argmax_logprob;  // [rows]
  pybind11::dict hidden;                    // {layer: float32 [num_tokens, hidden_size]}
};

// The requests of one step, copied out of a sequence of StepRequest (so the step runs without the
// GIL on values no other thread can change): TypeError naming the index for anything else, and
// saying what to write instead of a positional tuple.
std::vector<runner::StepRequest> step_requests(const pybind11::handle& requests);

// out as Python objects (with the GIL held). hidden_size: the width of a hidden-state row.
StepResult to_python(runner::StepOutput&& out, int64_t hidden_size, bool return_logits);

}  // namespace specdec::bindings
