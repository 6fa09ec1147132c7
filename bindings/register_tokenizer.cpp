// Tokenizers from GGUF metadata: specdec._core.Tokenizer and StreamDecoder (wrapped by
// python/specdec/tokenizer.py). Decoded text is returned as str with invalid UTF-8 replaced by
// U+FFFD; token pieces are returned as bytes.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "tokenizer/tokenizer.h"

namespace py = pybind11;
using namespace specdec::tokenizer;

namespace {

py::str to_str(const std::string& bytes) {
  PyObject* s =
      PyUnicode_DecodeUTF8(bytes.data(), static_cast<Py_ssize_t>(bytes.size()), "replace");
  if (s == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

// str (encoded as UTF-8) or bytes (taken as is, so invalid UTF-8 can be tokenized).
std::string to_bytes(const py::object& text) {
  if (py::isinstance<py::bytes>(text)) return text.cast<std::string>();
  if (py::isinstance<py::str>(text)) return text.cast<std::string>();
  throw py::type_error("text must be str or bytes");
}

std::optional<int32_t> optional_id(int32_t id) {
  return id == kNoToken ? std::nullopt : std::optional<int32_t>(id);
}

const char* token_type_name(TokenType type) {
  static constexpr const char* kNames[] = {"undefined",    "normal", "unknown", "control",
                                           "user_defined", "unused", "byte"};
  return kNames[static_cast<int>(type)];
}

}  // namespace

void register_tokenizer(py::module_& m) {
  py::class_<Tokenizer>(m, "Tokenizer",
                        "A tokenizer read from GGUF metadata (SPM `llama` or byte-level BPE "
                        "`gpt2`), tokenizing exactly as llama.cpp.")
      .def_static("from_file", &Tokenizer::from_file, py::arg("path"),
                  "Reads the tokenizer of a GGUF file; FormatError for malformed metadata, "
                  "UnsupportedError for tokenizers that are not implemented.")
      .def(
          "encode",
          [](const Tokenizer& t, const py::object& text, bool add_special, bool parse_special) {
            const std::string bytes = to_bytes(text);
            py::gil_scoped_release release;
            return t.encode(bytes, add_special, parse_special);
          },
          py::arg("text"), py::arg("add_special") = true, py::arg("parse_special") = false)
      .def(
          "encode_continuation",
          [](const Tokenizer& t, const py::object& text) {
            const std::string bytes = to_bytes(text);
            py::gil_scoped_release release;
            return t.encode_continuation(bytes);
          },
          py::arg("text"),
          "Token ids of text that continues earlier text: no BOS / EOS, no special tokens parsed, no "
          "SPM space prefix at its start.")
      .def(
          "decode",
          [](const Tokenizer& t, const std::vector<int32_t>& ids, bool special, bool continuation) {
            return to_str(t.decode(ids, special, continuation));
          },
          py::arg("ids"), py::arg("special") = false, py::arg("continuation") = false)
      .def(
          "decode_bytes",
          [](const Tokenizer& t, const std::vector<int32_t>& ids, bool special) {
            return py::bytes(t.decode(ids, special));
          },
          py::arg("ids"), py::arg("special") = false)
      .def(
          "token_to_piece",
          [](const Tokenizer& t, int32_t id, bool special) {
            return py::bytes(t.token_to_piece(id, special));
          },
          py::arg("id"), py::arg("special") = true)
      .def(
          "token_text", [](const Tokenizer& t, int32_t id) { return to_str(t.token_text(id)); },
          py::arg("id"))
      .def(
          "token_type",
          [](const Tokenizer& t, int32_t id) { return token_type_name(t.token_type(id)); },
          py::arg("id"))
      .def(
          "token_id",
          [](const Tokenizer& t, const std::string& text) { return optional_id(t.token_id(text)); },
          py::arg("text"))
      .def("is_eog", &Tokenizer::is_eog, py::arg("id"))
      .def(
          "encode_with_markup",
          [](const Tokenizer& t, const py::object& text,
             const std::vector<std::pair<size_t, size_t>>& markup, bool add_special) {
            const std::string bytes = to_bytes(text);
            py::gil_scoped_release release;
            return t.encode_with_markup(bytes, markup, add_special);
          },
          py::arg("text"), py::arg("markup"), py::arg("add_special") = true,
          "Token ids of a rendered chat: control tokens are parsed only inside the markup byte "
          "ranges [begin, end) of the UTF-8 text (the template's own text).")
      .def(
          "control_text_spans",
          [](const Tokenizer& t, const py::str& text) {
            const std::string bytes = text.cast<std::string>();
            std::vector<std::pair<size_t, size_t>> spans;
            {
              py::gil_scoped_release release;
              spans = t.control_text_spans(bytes);
            }
            // byte offsets -> code point offsets of the Python string (valid UTF-8 from a str)
            size_t byte = 0, cp = 0;
            auto advance = [&](size_t to) {
              for (; byte < to; ++byte) cp += (uint8_t(bytes[byte]) & 0xC0) != 0x80;
              return cp;
            };
            std::vector<std::pair<size_t, size_t>> out;
            out.reserve(spans.size());
            for (const auto& [b, e] : spans) {
              const size_t first = advance(b);
              out.emplace_back(first, advance(e));
            }
            return out;
          },
          py::arg("text"),
          "Code-point ranges [begin, end) of control- and unknown-token texts in `text` (left to "
          "right, longest first at each position, not overlapping).")
      .def_property_readonly("named_chat_templates",
                             [](const Tokenizer& t) {
                               py::dict out;
                               for (const auto& [name, source] : t.named_chat_templates()) {
                                 out[to_str(name)] = to_str(source);
                               }
                               return out;
                             })
      .def_property_readonly("vocab_size", &Tokenizer::vocab_size)
      .def_property_readonly("kind",
                             [](const Tokenizer& t) { return tokenizer_kind_name(t.kind()); })
      .def_property_readonly("pre", &Tokenizer::pre_name)
      .def_property_readonly("bos_token_id",
                             [](const Tokenizer& t) { return optional_id(t.bos_id()); })
      .def_property_readonly("eos_token_id",
                             [](const Tokenizer& t) { return optional_id(t.eos_id()); })
      .def_property_readonly("eog_token_ids", &Tokenizer::eog_ids)
      .def_property_readonly("add_bos", &Tokenizer::add_bos)
      .def_property_readonly("add_eos", &Tokenizer::add_eos)
      .def_property_readonly("add_space_prefix", &Tokenizer::add_space_prefix)
      .def_property_readonly("num_merges", &Tokenizer::num_merges)
      .def_property_readonly("chat_template", [](const Tokenizer& t) -> std::optional<py::str> {
        if (t.chat_template().empty()) return std::nullopt;
        return to_str(t.chat_template());
      });

  py::class_<StreamDecoder>(m, "StreamDecoder",
                            "Detokenizes one id at a time without splitting a UTF-8 character.")
      .def(py::init<const Tokenizer&, bool, bool>(), py::arg("tokenizer"),
           py::arg("special") = false, py::arg("continuation") = false, py::keep_alive<1, 2>())
      .def(
          "push", [](StreamDecoder& d, int32_t id) { return to_str(d.push(id)); }, py::arg("id"))
      .def(
          "push_many",
          [](StreamDecoder& d, const std::vector<int32_t>& ids) {
            std::string text;
            for (int32_t id : ids) text += d.push(id);
            return to_str(text);
          },
          py::arg("ids"))
      .def("flush", [](StreamDecoder& d) { return to_str(d.flush()); })
      .def("reset", &StreamDecoder::reset);
}
