// Token vectors from llama.cpp itself, for scripts/gen_ugm_vectors.py (not part of the specdec
// build). Reads one input per line from stdin, each the hex of the text's bytes ("" for the empty
// text), and writes one line per input:
//   <ids> | <ids parse_special> | <ids add_special> | <hex of llama_detokenize(ids)>
// ids are space-separated; the first list is llama_tokenize(add_special=false,
// parse_special=false), as llama.cpp's test-tokenizer-0 reads its .out files; llama_detokenize is
// called with remove_special=false, unparse_special=false.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "llama.h"

static std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += char(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

static std::vector<llama_token> tokenize(const llama_vocab* vocab, const std::string& text,
                                         bool add_special, bool parse_special) {
  std::vector<llama_token> ids(text.size() + 8);
  int32_t n = llama_tokenize(vocab, text.data(), int32_t(text.size()), ids.data(),
                             int32_t(ids.size()), add_special, parse_special);
  if (n < 0) {
    ids.resize(-n);
    n = llama_tokenize(vocab, text.data(), int32_t(text.size()), ids.data(), int32_t(ids.size()),
                       add_special, parse_special);
  }
  ids.resize(n);
  return ids;
}

static void print_ids(const std::vector<llama_token>& ids) {
  for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %d" : "%d", ids[i]);
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s VOCAB.gguf < inputs.hex\n", argv[0]);
    return 2;
  }
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  llama_backend_init();
  llama_model_params params = llama_model_default_params();
  params.vocab_only = true;
  llama_model* model = llama_model_load_from_file(argv[1], params);
  if (model == nullptr) {
    std::fprintf(stderr, "cannot load %s\n", argv[1]);
    return 1;
  }
  const llama_vocab* vocab = llama_model_get_vocab(model);
  std::string line;
  while (std::getline(std::cin, line)) {
    const std::string text = unhex(line);
    const std::vector<llama_token> ids = tokenize(vocab, text, false, false);
    print_ids(ids);
    std::printf(" | ");
    print_ids(tokenize(vocab, text, false, true));
    std::printf(" | ");
    print_ids(tokenize(vocab, text, true, false));
    std::printf(" | ");
    std::vector<char> buf(text.size() * 4 + 64);
    int32_t n = llama_detokenize(vocab, ids.data(), int32_t(ids.size()), buf.data(),
                                 int32_t(buf.size()), false, false);
    if (n < 0) {
      buf.resize(-n);
      n = llama_detokenize(vocab, ids.data(), int32_t(ids.size()), buf.data(), int32_t(buf.size()),
                           false, false);
    }
    for (int32_t i = 0; i < n; ++i) std::printf("%02x", (unsigned char)buf[i]);
    std::printf("\n");
  }
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
