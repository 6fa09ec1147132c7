// LogitsHead: a step's logit rows through the output head: the whole lm_head, or the rows of a
// reduced vocabulary (RunnerOptions::logit_token_ids) with the extra tokens of the next steps
// beside them; the model's final softcap; per row the argmax and its logprob reduced on the
// device, so greedy decoding reads back no logits. Not locked itself: the runner's lock guards it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "device/device.h"
#include "model/config.h"
#include "model/gguf.h"
#include "quant/device_weight.h"
#include "runner/model_weights.h"
#include "runner/step_io.h"

namespace specdec::runner {

struct StepBuffers;

class LogitsHead {
 public:
  static constexpr int64_t kMaxExtraTokens = 8192;

  // Checks options.logit_token_ids (ConfigError) and, when there are some, replaces
  // weights.output by their rows. dev, file and config must outlive the head.
  LogitsHead(device::Device& dev, const model::GgufFile& file, const model::ModelConfig& config,
             const RunnerOptions& options, ModelWeights& weights);

  // The width of a logits row: |logit_token_ids| + |extra tokens|, or the vocabulary size.
  int64_t num_columns() const;
  // Token ids the file's lm_head has rows for: min(its rows, vocab_size).
  int64_t num_lm_head_rows() const;
  // ModelRunner::set_extra_logit_tokens (documented there).
  void set_extra_tokens(const std::vector<int32_t>& ids);
  const std::vector<int32_t>& extra_tokens() const { return extra_ids_; }

  // The logits of num_rows >= 1 rows of s.h [num_tokens, hidden] (their indices in s.rows) with
  // `head` (this model's lm_head, or a DFlash target's): out.argmax and out.argmax_logprob, and
  // out.logits [num_rows, out.vocab_size] with return_logits.
  void compute(const quant::DeviceWeight& head, StepBuffers& s, int64_t num_tokens, int64_t num_rows,
               bool return_logits, StepOutput& out);

 private:
  // logits of `w` into `logits` [m, n], then [argmax column | logsumexp | logit there] into
  // s.reduced from element `at`
  void reduce(const quant::DeviceWeight& w, StepBuffers& s, int64_t m, device::Buffer& logits, int64_t n,
              int64_t at);
  // out.argmax and out.argmax_logprob from the reductions of the head (and of the extra tokens)
  void pick(const std::vector<float>& reduced, int64_t m, StepOutput& out) const;
  // out.logits: the rows of [head | extra tokens]
  void read_logits(StepBuffers& s, int64_t m, StepOutput& out);
  // Token column `column` of the head's part, or of the extra tokens' part.
  int32_t token(int32_t column, bool in_extra) const;

  device::Device& dev_;
  const model::GgufFile& file_;
  const model::ModelConfig& config_;
  std::vector<int32_t> logit_token_ids_;
  int64_t max_num_logits_ = 0;
  // set_extra_tokens: the rows and their logits [max_num_logits, capacity]
  std::vector<int32_t> extra_ids_;
  std::optional<quant::DeviceWeight> extra_head_;
  device::Buffer extra_logits_;
  int64_t extra_capacity_ = 0;
};

}  // namespace specdec::runner
