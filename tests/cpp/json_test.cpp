// cpp/common/json: nesting bounded while parsing and a non-recursive rendering for messages, and
// every reader of untrusted JSON (config.json, speculative_config) refusing deep nesting with an
// error instead of overflowing the stack (issue 20, item 3).
#include "common/json.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "common/errors.h"
#include "model/config.h"
#include "spec_decode/config.h"

using namespace specdec;
using nlohmann::json;

namespace {

std::string nested_text(int depth, const std::string& leaf = "1") {
  return std::string(static_cast<size_t>(depth), '[') + leaf +
         std::string(static_cast<size_t>(depth), ']');
}

// A value nested `depth` arrays deep, built without recursion (nlohmann destroys it iteratively).
json nested_value(int depth) {
  json value = 1;
  for (int i = 0; i < depth; ++i) {
    json outer = json::array();
    outer.push_back(std::move(value));
    value = std::move(outer);
  }
  return value;
}

// A llama config.json whose hidden_size is `hidden_size` (JSON text).
std::string config_text(const std::string& hidden_size) {
  return R"({"model_type": "llama", "num_hidden_layers": 2, "intermediate_size": 64,
             "num_attention_heads": 2, "vocab_size": 32, "max_position_embeddings": 64,
             "hidden_size": )" +
         hidden_size + "}";
}

template <typename Error, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(Json, DepthIsBoundedWhileParsing) {
  EXPECT_EQ(parse_json(nested_text(kMaxJsonDepth)).dump(), nested_text(kMaxJsonDepth));
  const std::string err = error_of<FormatError>([] { parse_json(nested_text(kMaxJsonDepth + 1)); });
  EXPECT_TRUE(has(err, "nested deeper than 64 levels")) << err;
  EXPECT_THROW(parse_json(R"({"a": {"b": [1]}})", 2), FormatError);
  EXPECT_NO_THROW(parse_json(R"({"a": {"b": 1}})", 2));
  for (int depth : {100'000, 200'000, 1'000'000}) {
    EXPECT_THROW(parse_json(nested_text(depth)), FormatError) << depth;
    std::string objects;
    for (int i = 0; i < depth; ++i) objects += R"({"a":)";
    const std::string deep_err = error_of<FormatError>([&] { parse_json(objects); });
    EXPECT_TRUE(has(deep_err, "nested deeper than 64 levels")) << deep_err;
  }
}

TEST(Json, SyntaxErrorsAreShortFormatErrors) {
  EXPECT_THROW(parse_json(""), FormatError);
  EXPECT_THROW(parse_json("{\"a\": 1} x"), FormatError);
  const std::string err =
      error_of<FormatError>([] { parse_json("\"" + std::string(100'000, 'x')); });  // unterminated
  EXPECT_LE(err.size(), 240u) << err;
}

TEST(Json, SummaryOfAnyDepthDoesNotRecurse) {
  EXPECT_EQ(json_summary(json::parse(R"({"a":[1,"x",null],"b":{}})")),
            R"({"a":[1,"x",null],"b":{}})");
  EXPECT_EQ(json_summary(nested_value(3)), "[[[1]]]");
  const json deep = nested_value(1'000'000);
  const std::string shown = json_summary(deep);
  EXPECT_EQ(shown, std::string(77, '[') + "...");
  EXPECT_EQ(json_summary(json(std::string(10'000'000, 'y')), 10), "\"yyyyyy...");
  EXPECT_EQ(json_summary(json(std::string("\xff\xfe"))).find('\xff'),
            std::string::npos);  // valid UTF-8
}

TEST(Json, DeepConfigJsonIsAnErrorNotACrash) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("specdec_json_test_" + std::to_string(::getpid()) + "_config.json");
  std::ofstream(path) << config_text(nested_text(200'000));
  const std::string err = error_of<FormatError>([&] { model::load_model_config(path.string()); });
  std::filesystem::remove(path);
  EXPECT_TRUE(has(err, path.string()) && has(err, "64 levels")) << err;
  // a value built in code (no parse to bound it) is still rendered without recursion
  json config = json::parse(config_text("0"));
  config["hidden_size"] = nested_value(200'000);
  const std::string field_err =
      error_of<ConfigError>([&] { model::config_from_hf_json(config, "mem"); });
  EXPECT_TRUE(has(field_err, "hidden_size = [[[")) << field_err;
  EXPECT_LT(field_err.size(), 300u) << field_err;
}

TEST(Json, DeepSpeculativeConfigTextIsAnErrorNotACrash) {
  for (const std::string& text :
       {nested_text(100'000), R"({"method": )" + nested_text(100'000) + "}"}) {
    const std::string err =
        error_of<ConfigError>([&] { spec_decode::SpeculativeConfig::from_json_text(text); });
    EXPECT_TRUE(has(err, "speculative_config = [[[") ||
                has(err, "speculative_config = {\"method\": [[["))
        << err;
    EXPECT_TRUE(has(err, "64 levels")) << err;
    EXPECT_LT(err.size(), 400u) << err;
  }
  json config = json::object();
  config["method"] = nested_value(200'000);
  const std::string err =
      error_of<ConfigError>([&] { spec_decode::SpeculativeConfig::from_json(config); });
  EXPECT_TRUE(has(err, "speculative_config.method = [[[")) << err;
  EXPECT_LT(err.size(), 300u) << err;
}

// Issue 34, item 4: nlohmann's parse with a callback scans the parent of every object that ends,
// so 300,000 objects in one array or object (a tokenizer's added_tokens, a safetensors header)
// took hours. The tree is now built by JsonBuilder in linear time.
TEST(Json, ManyObjectsParseInLinearTime) {
  constexpr int n = 300000;
  std::string text = "[";
  std::string members = "{";
  for (int i = 0; i < n; ++i) {
    text += (i ? ",{\"id\":" : "{\"id\":") + std::to_string(i) + "}";
    members += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":{\"v\":[" + std::to_string(i) + "]}";
  }
  text += "]";
  members += "}";
  const json a = parse_json(text);
  ASSERT_EQ(a.size(), static_cast<size_t>(n));
  EXPECT_EQ(a[n - 1]["id"], n - 1);
  const json o = parse_json(members);
  ASSERT_EQ(o.size(), static_cast<size_t>(n));
  EXPECT_EQ(o["k123"]["v"][0], 123);
}

TEST(Json, LimitsOfTheBuilder) {
  JsonLimits unique;
  unique.unique_keys = true;
  EXPECT_EQ(parse_json(R"({"a": 1, "a": 2})")["a"], 2);  // default: the last wins, as nlohmann
  const std::string dup = error_of<FormatError>([&] { parse_json(R"({"x": {"a": 1, "a": 2}})", unique); });
  EXPECT_TRUE(has(dup, "duplicate key \"a\"")) << dup;
  JsonLimits few;
  few.max_values = 10;
  EXPECT_NO_THROW(parse_json("[1,2,3,4,5,6,7,8]", few));  // 8 values, an open and a close
  const std::string many = error_of<FormatError>([&] { parse_json("[1,2,3,4,5,6,7,8,9]", few); });
  EXPECT_TRUE(has(many, "more than 10 values")) << many;
  EXPECT_THROW(parse_json("[1, 2", few), FormatError);
}

TEST(Json, MembersAreStreamedOneByOne) {
  JsonLimits limits;
  limits.max_values = 6;  // per member: each is handed over and dropped
  std::vector<std::string> keys;
  JsonBuilder builder(limits, [&](std::string& key, json& value) {
    keys.push_back(key + "=" + value.dump());
  });
  const std::string text = R"({"a": [1, 2], "b": {"c": null}, "d": "x", "a": 3})";
  json::sax_parse(text.begin(), text.end(), &builder);
  EXPECT_EQ(keys, (std::vector<std::string>{"a=[1,2]", "b={\"c\":null}", "d=\"x\"", "a=3"}));
  EXPECT_TRUE(builder.result().is_object() && builder.result().empty());
  JsonBuilder scalar(limits, [](std::string&, json&) { ADD_FAILURE() << "not an object"; });
  const std::string two = "[1, 2]";
  json::sax_parse(two.begin(), two.end(), &scalar);
  EXPECT_EQ(scalar.result().dump(), "[1,2]");
  JsonBuilder bounded(limits, [](std::string&, json&) {});
  const std::string big = R"({"a": [1, 2, 3, 4, 5, 6]})";
  EXPECT_THROW(json::sax_parse(big.begin(), big.end(), &bounded), FormatError);
}

TEST(Json, FilesAreCappedBeforeTheyAreRead) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("specdec_json_cap_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << R"({"pad": ")" << std::string(4096, 'x') << R"("})";
  EXPECT_EQ(read_json_file(path)["pad"].get<std::string>().size(), 4096u);
  const std::string err = error_of<FormatError>([&] { read_json_file(path, 1024); });
  EXPECT_TRUE(has(err, path.string()) && has(err, "4107 bytes, more than the 1024 bytes")) << err;
  std::filesystem::remove(path);
}
