// The typed input and output of ModelRunner.step across the binding (register_step.cpp):
// specdec._core.StepRequest (runner::StepRequest itself) and specdec._core.StepOutput.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <vector>

#include "runner/model_runner.h"
#include "spec_decode/step_verifier.h"

namespace specdec::bindings {

// What Python sees of a runner::StepOutput: the step's C++ vectors (moved in, not copied). Each
// is handed to its own NumPy array when Python first reads it (moved again, so a kept array holds
// its own memory only, not the step's other arrays); a step whose arrays Python never reads makes
// none. `rows` views the data wherever it lives (the moves keep the vectors' memory).
struct StepResult {
  runner::StepOutput out;
  spec_decode::StepRows rows;
  int64_t hidden_size = 0;  // the width of a hidden-state row
  int64_t logit_rows = 0;   // rows of the logits (0 without return_logits)
  int64_t num_rows = 0;     // argmax rows
  pybind11::object logits, argmax, argmax_logprob;  // made on first read
  pybind11::object hidden;                          // {layer: array}, made on first read
};

// The requests of one step, copied out of a sequence of StepRequest (so the step runs without the
// GIL on values no other thread can change): TypeError naming the index for anything else, and
// saying what to write instead of a positional tuple.
std::vector<runner::StepRequest> step_requests(const pybind11::handle& requests);

// out as Python objects (with the GIL held). hidden_size: the width of a hidden-state row.
StepResult to_python(runner::StepOutput&& out, int64_t hidden_size, bool return_logits);

// StepVerifier outcomes as Python gives them: [(tokens, num_accepted, argmax_logprob, finish,
// num_computed)] (register_verify.cpp).
pybind11::list to_python(const std::vector<spec_decode::VerifyOutcome>& outs);

}  // namespace specdec::bindings
