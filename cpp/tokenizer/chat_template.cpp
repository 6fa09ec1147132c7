#include "tokenizer/chat_template.h"

#include <optional>
#include <string_view>

#include "common/errors.h"
#include "tokenizer/unicode.h"

namespace specdec::tokenizer {
namespace {

constexpr std::string_view kImStart = "<|im_start|>";
constexpr std::string_view kImEnd = "<|im_end|>";
constexpr std::string_view kStartOfTurn = "<start_of_turn>";

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// The Jinja string literal whose body starts at `body` (just after the opening `quote`), with its
// escapes resolved; nullopt when unterminated.
std::optional<std::string> read_literal(std::string_view source, size_t body, char quote) {
  std::string out;
  for (size_t i = body; i < source.size(); ++i) {
    const char c = source[i];
    if (c == quote) return out;
    if (c != '\\' || i + 1 >= source.size()) {
      out += c;
      continue;
    }
    const char e = source[++i];
    out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
  }
  return std::nullopt;
}

// The first literal of the form '<|im_start|>system\n{prompt}<|im_end|>\n' in the source.
std::string find_default_system_prompt(std::string_view source) {
  const std::string head = std::string(kImStart) + "system\n";
  const std::string tail = std::string(kImEnd) + "\n";
  for (size_t pos = source.find(kImStart); pos != std::string_view::npos;
       pos = source.find(kImStart, pos + 1)) {
    if (pos == 0 || (source[pos - 1] != '\'' && source[pos - 1] != '"')) continue;
    const std::optional<std::string> literal = read_literal(source, pos, source[pos - 1]);
    if (!literal || literal->size() <= head.size() + tail.size()) continue;
    if (literal->compare(0, head.size(), head) != 0) continue;
    if (literal->compare(literal->size() - tail.size(), tail.size(), tail) != 0) continue;
    return literal->substr(head.size(), literal->size() - head.size() - tail.size());
  }
  return "";
}

// Python's str.isspace (Jinja's trim): White_Space and U+001C..U+001F.
bool python_space(uint32_t cp) { return is_white_space(cp) || (cp >= 0x1C && cp <= 0x1F); }

// Jinja's `trim` filter.
std::string trim(std::string_view text) {
  uint32_t cp = 0;
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t len = decode_utf8_at(text, begin, cp);
    if (len == 0 || !python_space(cp)) break;
    begin += len;
  }
  size_t end = text.size();
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && end - start < 4 && (uint8_t(text[start]) & 0xC0) == 0x80) --start;
    if (decode_utf8_at(text.substr(0, end), start, cp) != end - start || !python_space(cp)) break;
    end = start;
  }
  return std::string(text.substr(begin, end - begin));
}

// Appends to a RenderedChat, recording which bytes the template wrote.
class ChatWriter {
 public:
  void markup(std::string_view text) {
    if (text.empty()) return;
    const size_t begin = out_.text.size();
    out_.text += text;
    if (!out_.markup.empty() && out_.markup.back().second == begin) {
      out_.markup.back().second = out_.text.size();  // extends the previous range
    } else {
      out_.markup.emplace_back(begin, out_.text.size());
    }
  }
  void content(std::string_view text) { out_.text += text; }
  RenderedChat take() { return std::move(out_); }

 private:
  RenderedChat out_;
};

RenderedChat render_chatml(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                           bool add_generation_prompt) {
  ChatWriter out;
  if (!t.default_system_prompt.empty() && messages.front().role != "system") {
    out.markup(str_cat(kImStart, "system\n", t.default_system_prompt, kImEnd, "\n"));
  }
  for (const ChatMessage& m : messages) {
    if (m.role != "system" && m.role != "user" && m.role != "assistant") {
      throw UnsupportedError(str_cat("chat role '", m.role,
                                     "' is not supported by the ChatML "
                                     "renderer; supported roles: system, user, assistant"));
    }
    out.markup(str_cat(kImStart, m.role, "\n"));
    out.content(m.content);
    out.markup(str_cat(kImEnd, "\n"));
  }
  if (add_generation_prompt) out.markup(str_cat(kImStart, "assistant\n"));
  return out.take();
}

RenderedChat render_gemma(const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  size_t first = 0;
  if (messages.front().role == "system") first = 1;
  ChatWriter out;
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const bool even = (i - first) % 2 == 0;
    if ((m.role == "user") != even) {
      throw ConfigError(str_cat("messages[", i, "].role"), m.role,
                        "Gemma conversations alternate user/assistant/user/... after an "
                        "optional first system message");
    }
    // the role is the caller's text (the template renders any role at an assistant turn)
    out.markup(kStartOfTurn);
    out.content(m.role == "assistant" ? std::string("model") : m.role);
    out.markup("\n");
    if (i == first && first == 1) out.content(messages.front().content + "\n\n");
    out.content(trim(m.content));
    out.markup("<end_of_turn>\n");
  }
  if (add_generation_prompt) out.markup(str_cat(kStartOfTurn, "model\n"));
  return out.take();
}

}  // namespace

const char* chat_template_kind_name(ChatTemplateKind kind) {
  return kind == ChatTemplateKind::kChatMl ? "chatml" : "gemma";
}

ChatTemplate ChatTemplate::parse(const std::string& source) {
  if (source.empty()) {
    throw UnsupportedError(
        "the model file has no chat template (tokenizer.chat_template); format the prompt "
        "yourself and encode it with parse_special=True");
  }
  ChatTemplate t;
  if (contains(source, kImStart) && contains(source, kImEnd)) {
    if (contains(source, "<think>")) {
      throw UnsupportedError(
          "ChatML chat template with reasoning (<think>) blocks is not "
          "supported; supported: plain ChatML (SmolLM2, Qwen2.5) and Gemma");
    }
    t.kind = ChatTemplateKind::kChatMl;
    t.default_system_prompt = find_default_system_prompt(source);
    return t;
  }
  if (contains(source, kStartOfTurn)) {
    t.kind = ChatTemplateKind::kGemma;
    return t;
  }
  throw UnsupportedError(str_cat("chat template not recognised (", source.size(),
                                 " chars, starting '", source.substr(0, 60),
                                 "'); supported: ChatML (<|im_start|>: SmolLM2, Qwen2.5) and Gemma "
                                 "(<start_of_turn>)"));
}

RenderedChat ChatTemplate::render(const std::vector<ChatMessage>& messages,
                                  bool add_generation_prompt) const {
  if (messages.empty()) throw ConfigError("messages", "[]", "at least one message is required");
  return kind == ChatTemplateKind::kChatMl ? render_chatml(*this, messages, add_generation_prompt)
                                           : render_gemma(messages, add_generation_prompt);
}

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt) const {
  return render(messages, add_generation_prompt).text;
}

}  // namespace specdec::tokenizer
