// dflash: z-lab's block-diffusion drafter. The drafter (a DFlash checkpoint's ModelRunner) has no
// embedding or head of its own: it reads the target's. After every target step the target's
// residual stream after the drafter's target_layer_ids, for every row of the step, goes on the
// device to the drafter, which projects it (fc, hidden_norm) into each layer's context K/V at the
// rows' absolute positions (ModelRunner::write_context: rows of rejected drafts are rolled back
// later, as the target's are). To draft, one non-causal forward over [last token, mask x k] at
// the request's next positions gives all k draft tokens at once (mask row j: the token at its
// position); the block's own K/V are rolled back afterwards. Greedy or sampled (the draft's
// probabilities go to the rejection sampler), so the target's output is unchanged.
#pragma once

#include <memory>

#include "runner/model_runner.h"
#include "spec_decode/drafter_state.h"
#include "spec_decode/proposer.h"

namespace specdec::spec_decode {

class DFlashProposer final : public Proposer {
 public:
  // Attaches drafter and target to each other (the drafter reads the target's embedding and
  // head; the target's steps write the drafter's context). ConfigError when the drafter is not a
  // DFlash drafter of this target.
  DFlashProposer(std::shared_ptr<runner::ModelRunner> target, std::shared_ptr<runner::ModelRunner> drafter);
  ~DFlashProposer() override;  // the target stops feeding the drafter
  std::string name() const override { return "dflash"; }
  bool drafts_full_length() const override { return true; }
  std::vector<Draft> propose(const std::vector<ProposeRequest>& requests) override;
  void finish(const Sequence& sequence) override;

  const std::shared_ptr<runner::ModelRunner>& drafter() const { return drafter_; }
  int max_draft_tokens() const { return drafter_->config().dflash_block_size - 1; }
  int64_t num_steps() const { return num_steps_; }

 private:
  std::shared_ptr<runner::ModelRunner> target_, drafter_;
  DrafterRequests cache_;
  uint64_t sink_token_ = 0;
  int64_t num_steps_ = 0;
};

}  // namespace specdec::spec_decode
