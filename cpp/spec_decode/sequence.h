// A request's token sequence as the speculative engine sees it: the prompt and every token
// accepted so far. One owner (the Python engine's Request) appends; proposers read it without
// copying it across the language boundary each step.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace specdec::spec_decode {

class Sequence {
 public:
  Sequence(std::string request_id, std::vector<int32_t> prompt)
      : request_id_(std::move(request_id)), tokens_(std::move(prompt)),
        num_prompt_tokens_(static_cast<int64_t>(tokens_.size())) {}

  const std::string& request_id() const { return request_id_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t num_prompt_tokens() const { return num_prompt_tokens_; }
  int64_t num_output_tokens() const { return size() - num_prompt_tokens_; }
  void append(const std::vector<int32_t>& ids) { tokens_.insert(tokens_.end(), ids.begin(), ids.end()); }
  void append(int32_t id) { tokens_.push_back(id); }

 private:
  std::string request_id_;
  std::vector<int32_t> tokens_;
  int64_t num_prompt_tokens_;
};

}  // namespace specdec::spec_decode
