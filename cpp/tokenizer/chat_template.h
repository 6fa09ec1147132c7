// Chat templates from `tokenizer.chat_template`. The Jinja source is not executed: it is recognised
// as one of the families below and rendered by hand, and anything else is refused rather than
// rendered wrongly.
//   ChatML (the template contains <|im_start|>; SmolLM2, Qwen2.5):
//     <|im_start|>{role}\n{content}<|im_end|>\n per message, then <|im_start|>assistant\n.
//     When the template injects a default system message (a literal
//     '<|im_start|>system\n...<|im_end|>' in the source) it is prepended if the conversation does
//     not start with a system message.
//   Gemma (the template contains <start_of_turn>): a leading system message becomes a prefix of
//     the first user turn; roles must alternate user/assistant; "assistant" is rendered "model";
//     contents are trimmed; <start_of_turn>model\n opens the reply. The template's leading
//     {{ bos_token }} is left out: encode(add_special=true) adds BOS.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace specdec::tokenizer {

struct ChatMessage {
  std::string role;
  std::string content;
};

enum class ChatTemplateKind { kChatMl, kGemma };

// A rendered conversation: the text, and the byte ranges [begin, end) the template itself wrote
// (its markers such as <|im_start|> and the roles' framing). Everything else came from the
// messages. Tokenizer::encode_chat parses control tokens only inside `markup`, so text in a
// message can never become a control token.
struct RenderedChat {
  std::string text;
  std::vector<std::pair<size_t, size_t>> markup;
};

struct ChatTemplate {
  ChatTemplateKind kind = ChatTemplateKind::kChatMl;
  std::string default_system_prompt;  // ChatML only; empty when the template injects none

  // Recognises `source`; throws UnsupportedError for an empty or unrecognised template.
  static ChatTemplate parse(const std::string& source);
  // Throws ConfigError for an empty conversation or roles the template rejects, and
  // UnsupportedError for roles this renderer does not implement (e.g. ChatML "tool").
  std::string apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
  RenderedChat render(const std::vector<ChatMessage>& messages, bool add_generation_prompt) const;
};

// "chatml" or "gemma".
const char* chat_template_kind_name(ChatTemplateKind kind);

}  // namespace specdec::tokenizer
