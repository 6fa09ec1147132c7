// Derived vocabulary tables: special ids found by token text, the end-of-generation set, the order
// in which special tokens are split out of text, and the detokenized piece of every token. The
// text lists are llama.cpp's (src/llama-vocab.cpp, llama_vocab::impl::load), with one difference:
// only tokens the file types CONTROL are matched by text. llama.cpp also matches normal and
// user-defined tokens and retypes them CONTROL, so Qwen2.5's plain-text token '</s>' (128247) and
// Gemma 3's HTML tag '</s>' (212) would end generation and vanish from decoded text.
#include <algorithm>
#include <cctype>
#include <set>

#include "common/errors.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab.h"

namespace specdec::tokenizer {
namespace {

using TextList = std::initializer_list<std::string_view>;

bool in(std::string_view text, TextList list) {
  return std::find(list.begin(), list.end(), text) != list.end();
}

bool control_with_text(const Vocab& v, int32_t id, TextList list) {
  return v.tokens[id].type == TokenType::kControl && in(v.tokens[id].text, list);
}

// Sets `id` (when unset) to the lowest control token whose text is in `list`.
void detect(const Vocab& v, int32_t& id, TextList list) {
  if (id != kNoToken) return;
  for (int32_t i = 0; i < v.size(); ++i) {
    if (control_with_text(v, i, list)) {
      id = i;
      return;
    }
  }
}

void detect_ids_by_text(Vocab& v) {
  SpecialTokens& s = v.special;
  detect(v, s.eot,
         {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
          "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<\uFF5Cend\u2581of\u2581sentence\uFF5C>",
          "<end_of_utterance>"});
  detect(v, s.eom, {"<|eom_id|>"});
  detect(v, s.fim_pre,
         {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\uFF5Cfim\u2581begin\uFF5C>", "<PRE>",
          "\u2581<PRE>", "<|code_prefix|>", "<|prefix|>"});
  detect(v, s.fim_suf,
         {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\uFF5Cfim\u2581hole\uFF5C>", "<SUF>",
          "\u2581<SUF>", "<|code_suffix|>", "<|suffix|>"});
  detect(v, s.fim_mid,
         {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\uFF5Cfim\u2581end\uFF5C>", "<MID>",
          "\u2581<MID>", "<|code_middle|>", "<|middle|>"});
  detect(v, s.fim_pad, {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"});
  detect(v, s.fim_rep, {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
  detect(v, s.fim_sep, {"<|file_sep|>"});
}

// End of generation: FIM pad/repo/file-separator, tokens with end-of-turn text, EOS, EOT, EOM.
void build_eog(Vocab& v) {
  const SpecialTokens& s = v.special;
  std::set<int32_t> eog;
  for (int32_t id : {s.fim_pad, s.fim_rep, s.fim_sep}) {
    if (id != kNoToken) eog.insert(id);
  }
  for (int32_t i = 0; i < v.size(); ++i) {
    if (control_with_text(v, i,
                          {"<|eot_id|>",
                           "<|im_end|>",
                           "<|end|>",
                           "<|return|>",
                           "<|call|>",
                           "<|flush|>",
                           "<|calls|>",
                           "<end_of_turn>",
                           "<|endoftext|>",
                           "</s>",
                           "<|eom_id|>",
                           "<EOT>",
                           "_<EOT>",
                           "[EOT]",
                           "[EOS]",
                           "<|end_of_text|>",
                           "<end_of_utterance>",
                           "<eos>",
                           "<turn|>",
                           "<|tool_response>",
                           "<\uFF5Cend\u2581of\u2581sentence\uFF5C>",
                           "[e~["})) {
      eog.insert(i);
    }
  }
  for (int32_t id : {s.eos, s.eot, s.eom}) {
    if (id != kNoToken) eog.insert(id);
  }
  // Harmony-style vocabularies end turns with <|return|>/<|call|>: <|end|> does not end them.
  auto has = [&](TextList list) {
    return std::any_of(eog.begin(), eog.end(),
                       [&](int32_t id) { return in(v.tokens[id].text, list); });
  };
  if (has({"<|end|>"}) && ((has({"<|return|>"}) && has({"<|call|>", "<|calls|>"})) ||
                           (has({"<|call|>", "<|calls|>"}) && has({"<|flush|>"})))) {
    for (int32_t id : std::vector<int32_t>(eog.begin(), eog.end())) {
      if (v.tokens[id].text == "<|end|>") eog.erase(id), v.tokens[id].attr = kAttrUserDefined;
    }
  }
  if (has({"<|tool_response>"}) && has({"</s>"})) {
    for (int32_t id : std::vector<int32_t>(eog.begin(), eog.end())) {
      if (v.tokens[id].text == "</s>") eog.erase(id), v.tokens[id].attr = kAttrNormal;
    }
  }
  v.eog_ids.assign(eog.begin(), eog.end());
}

void build_special_order(Vocab& v) {
  v.special_token_order.clear();
  for (int32_t i = 0; i < v.size(); ++i) {
    if (v.tokens[i].attr & (kAttrControl | kAttrUserDefined | kAttrUnknown)) {
      v.special_token_order.push_back(i);
    }
  }
  std::stable_sort(
      v.special_token_order.begin(), v.special_token_order.end(),
      [&](int32_t a, int32_t b) { return v.tokens[a].text.size() > v.tokens[b].text.size(); });
}

bool contains_any(const std::string& text, TextList parts) {
  return std::any_of(parts.begin(), parts.end(),
                     [&](std::string_view p) { return text.find(p) != std::string::npos; });
}

// Model-specific strip attributes, keyed as llama.cpp keys them: <mask> strips the white space
// before it (nomic-bert-moe, jina-bert-v3 and the jina-v2 pre-tokenizers, by
// general.architecture and tokenizer.ggml.pre); Phi-3 strips white space after its special
// tokens (by general.name).
void apply_model_attrs(Vocab& v, std::string model_name, const std::string& architecture) {
  std::transform(model_name.begin(), model_name.end(), model_name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (contains_any(v.pre_name, {"jina-v2-de", "jina-v2-es", "jina-v2-code"}) ||
      contains_any(architecture, {"nomic-bert-moe", "jina-bert-v3"})) {
    if (int32_t id = v.find("<mask>"); id != kNoToken) v.tokens[id].attr |= kAttrLstrip;
    return;
  }
  if (model_name.find("phi-3") == std::string::npos &&
      model_name.find("phi3") == std::string::npos) {
    return;
  }
  for (int32_t id : v.special_token_order) v.tokens[id].attr |= kAttrRstrip;
  if (int32_t id = v.find("</s>"); id != kNoToken) v.tokens[id].attr |= kAttrRstrip;
  for (std::string_view text : {"<unk>", "<s>", "<|endoftext|>"}) {
    if (int32_t id = v.find(text); id != kNoToken) v.tokens[id].attr &= ~kAttrRstrip;
  }
}

std::string spm_piece(const TokenData& t) {
  std::string out;
  const std::string_view escaped = "\u2581";
  for (size_t i = 0; i < t.text.size();) {
    if (t.text.compare(i, escaped.size(), escaped) == 0) {
      out += ' ';
      i += escaped.size();
    } else {
      out += t.text[i++];
    }
  }
  return out;
}

std::string bpe_piece(const TokenData& t, const std::array<int, 0x144>& byte_of_code_point) {
  std::string out;
  for (uint32_t cp : decode_utf8(t.text)) {
    const int byte = cp < byte_of_code_point.size() ? byte_of_code_point[cp] : -1;
    if (byte >= 0) {
      out += static_cast<char>(byte);
    } else {
      append_utf8(cp, out);  // not in the byte alphabet: kept as text
    }
  }
  return out;
}

}  // namespace

void derive_special_tokens(Vocab& v, const std::string& model_name,
                           const std::string& architecture) {
  detect_ids_by_text(v);
  build_eog(v);
  build_special_order(v);
  apply_model_attrs(v, model_name, architecture);
}

void derive_pieces(Vocab& v) {
  std::array<int, 0x144> byte_of_code_point;
  byte_of_code_point.fill(-1);
  for (int b = 0; b < 256; ++b) byte_of_code_point[gpt2_byte_to_code_point(uint8_t(b))] = b;

  v.pieces.resize(v.tokens.size());
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const TokenData& t = v.tokens[i];
    if (t.attr & (kAttrControl | kAttrUnknown | kAttrUserDefined)) {
      v.pieces[i] = t.text;
    } else if (t.attr & kAttrNormal) {
      v.pieces[i] = v.kind != TokenizerKind::kBpe || v.utf8_symbols
                        ? spm_piece(t)
                        : bpe_piece(t, byte_of_code_point);
    } else if (t.attr & kAttrByte) {
      v.pieces[i] = std::string(1, static_cast<char>(std::stoi(t.text.substr(3, 2), nullptr, 16)));
    }
  }
  static const char* kHex = "0123456789ABCDEF";
  for (int b = 0; b < 256; ++b) {
    if (v.kind == TokenizerKind::kBpe && !v.utf8_symbols) {
      std::string text;
      append_utf8(gpt2_byte_to_code_point(uint8_t(b)), text);
      v.byte_tokens[b] = v.find(text);
    } else {
      const std::string hex = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
      const int32_t id = v.find(hex);
      v.byte_tokens[b] = id != kNoToken ? id : v.find(std::string(1, static_cast<char>(b)));
    }
  }
}

}  // namespace specdec::tokenizer
