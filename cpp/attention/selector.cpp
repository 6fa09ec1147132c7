#include "attention/selector.h"

#include <algorithm>
#include <cctype>

#include "attention/registry.h"
#include "common/errors.h"

namespace specdec::attn {
namespace {

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : sep) + p;
  return out;
}

bool is_auto(const std::string& requested) {
  std::string s = requested;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s.empty() || s == "auto" || s == "none";
}

}  // namespace

std::vector<BackendVerdict> evaluate_backends(const AttentionRequirements& r, const device::Info& device) {
  std::vector<BackendVerdict> out;
  for (const AttentionBackend* b : priority_list(device)) out.push_back({b, b->validate(r)});
  return out;
}

std::vector<BackendVerdict> evaluate_backends(const AttentionRequirements& r, const std::string& device_type) {
  return evaluate_backends(r, opencl_device_info(device_type));
}

std::string BackendChoice::explain() const {
  std::string out;
  for (const auto& v : verdicts) {
    out += v.backend->name() + ": ";
    if (v.backend == backend) {
      out += requested ? "chosen (requested)" : "chosen";
    } else if (v.reasons.empty()) {
      out += "fits (lower priority)";
    } else {
      out += "rejected: " + join(v.reasons, "; ");
    }
    out += "\n";
  }
  return out;
}

BackendChoice select_backend(const AttentionRequirements& r, const std::string& requested,
                             const device::Info& device) {
  r.validate();
  BackendChoice choice;
  if (!is_auto(requested)) {
    const AttentionBackend& b = get_backend(requested);
    choice.requested = true;
    choice.verdicts.push_back({&b, b.validate(r)});
    if (!b.runs_on(device.kind)) {
      choice.verdicts[0].reasons.push_back(str_cat("does not run on ", device::kind_name(device.kind), " devices"));
    }
    if (!choice.verdicts[0].reasons.empty()) {
      throw UnsupportedError(str_cat("attention backend ", b.name(), " cannot serve this layer (",
                                     r.to_string(), "): ", join(choice.verdicts[0].reasons, "; "),
                                     ". Use attention_backend='auto' or another backend."));
    }
    choice.backend = &b;
    return choice;
  }
  choice.verdicts = evaluate_backends(r, device);
  for (const auto& v : choice.verdicts) {
    if (v.reasons.empty()) {
      choice.backend = v.backend;
      return choice;
    }
  }
  std::string why;
  for (const auto& v : choice.verdicts) why += "\n  " + v.backend->name() + ": " + join(v.reasons, "; ");
  throw UnsupportedError(str_cat("no attention backend fits this layer (", r.to_string(), "):", why));
}

BackendChoice select_backend(const AttentionRequirements& r, const std::string& requested,
                             const std::string& device_type) {
  return select_backend(r, requested, opencl_device_info(device_type));
}

}  // namespace specdec::attn
