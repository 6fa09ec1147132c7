// DFlashContext: a runner's side of a DFlash pair. A target captures the residual stream after
// the drafter's target layers on the device and hands every full step's rows to a sink; a
// drafter reads the target's embedding and head, and writes those rows into its own KV cache as
// context (write_context_layers). Not locked itself: the runner's lock guards it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "device/device.h"
#include "model/config.h"
#include "runner/model_weights.h"
#include "runner/request_table.h"
#include "runner/step_io.h"

namespace specdec::runner {

class ModelRunner;
struct LayerStep;

// One request's rows of a target step: positions first_position .. + num_rows - 1, at rows
// first_row .. of the step (step order).
struct ContextRows {
  std::string request_id;
  int64_t first_position = 0;
  int64_t num_rows = 0;
  int64_t first_row = 0;
  // the rows' token ids (num_rows of them; empty: unknown): the drafter's prefix cache keys
  // its context blocks by them
  std::vector<int32_t> tokens;
};

// (requests, hidden [rows, n * hidden_size] on the device, rows)
using HiddenSink = std::function<void(const std::vector<ContextRows>&, const device::Buffer&, int64_t)>;

class DFlashContext {
 public:
  // ---- a target ----
  // ModelRunner::set_hidden_sink / clear_hidden_sink (documented there); the capture buffer holds
  // max_num_batched_tokens rows.
  uint64_t set_sink(device::Device& dev, const model::ModelConfig& config, int64_t max_num_batched_tokens,
                    const std::vector<int>& layers, HiddenSink sink);
  void clear_sink(uint64_t token);
  bool has_sink() const { return static_cast<bool>(sink_); }
  // In a full step, after layer `layer`: `from` [num_tokens, hidden] into that layer's columns
  // when it is captured.
  void capture(device::Device& dev, int layer, const device::Buffer& from, int64_t num_tokens, int hidden);
  // After a full step: its rows, request by request, to the sink.
  void send(const std::vector<StepRequest>& requests, int64_t num_tokens) const;

  // ---- a drafter ----
  // ModelRunner::set_dflash_target (documented there): ConfigError when `target` does not fit
  // `drafter` (its config and options).
  void set_target(const ModelRunner& drafter, std::shared_ptr<ModelRunner> target);
  const std::shared_ptr<ModelRunner>& target() const { return target_; }

 private:
  std::vector<int> capture_layers_;
  HiddenSink sink_;
  uint64_t sink_token_ = 0, next_sink_token_ = 0;
  device::Buffer captured_;  // [max_num_batched_tokens, n * hidden]
  std::shared_ptr<ModelRunner> target_;
};

// A drafter's write_context, before its step: the rows it keeps, each request rolled back to the
// rows' first position first. A request whose cache is shorter than that (rows it never saw), or
// whose rows pass max_model_len, is dropped instead: no context until its next prefill.
std::vector<const ContextRows*> keep_context_rows(const std::vector<ContextRows>& rows, int64_t num_rows,
                                                  int64_t max_model_len, RequestTable& requests);
// The step requests of the kept rows: no logits.
std::vector<StepRequest> context_requests(const std::vector<const ContextRows*>& kept);
// The kept rows of `hidden` [rows, width], contiguous: `hidden` itself, or (when one was dropped
// or rows were reordered) a copy in `gathered`.
const device::Buffer& contiguous_rows(device::Device& dev, const std::vector<const ContextRows*>& kept,
                                   const device::Buffer& hidden, int64_t width, device::Buffer& gathered);
// The context K/V of every layer from `hidden` [step.num_tokens, n * hidden_size]: the drafter's
// hidden_norm(fc(hidden)), the same input for every layer.
void write_context_layers(const LayerStep& step, const ModelWeights& weights, const device::Buffer& hidden);

}  // namespace specdec::runner
