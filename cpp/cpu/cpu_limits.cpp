#include "cpu/cpu_limits.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/errors.h"

namespace specdec::cpu {

namespace {

std::string_view trim(std::string_view s) {
  const char* space = " \t\r\n";
  const size_t first = s.find_first_not_of(space);
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(space) - first + 1);
}

// The whole text as a decimal integer (an optional '-' sign, digits only), nullopt otherwise.
std::optional<long long> parse_integer(std::string_view text) {
  text = trim(text);
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(sep, start), text.size());
    parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return parts;
}

std::vector<std::string_view> split_words(std::string_view text) {
  std::vector<std::string_view> words;
  for (std::string_view w : split(text, ' '))
    if (!w.empty()) words.push_back(w);
  return words;
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_octal(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const auto octal = [&](size_t k) { return s[k] >= '0' && s[k] <= '7'; };
    if (s[i] == '\\' && i + 3 < s.size() && octal(i + 1) && octal(i + 2) && octal(i + 3)) {
      out += static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0'));
      i += 3;
    } else {
      out += s[i];
    }
  }
  return out;
}

bool has_token(std::string_view list, std::string_view token) {
  for (std::string_view t : split(list, ','))
    if (t == token) return true;
  return false;
}

// The cgroup's directory under a mount whose root is mount_root: the mount shows only the part of
// the hierarchy below mount_root (a container's view); a path outside it maps to the mount itself.
std::string cgroup_dir(const std::string& mount, const std::string& mount_root,
                       const std::string& path) {
  std::string rel = path;
  if (mount_root != "/") {
    const bool inside = path.compare(0, mount_root.size(), mount_root) == 0 &&
                        (path.size() == mount_root.size() || path[mount_root.size()] == '/');
    rel = inside ? path.substr(mount_root.size()) : std::string();
  }
  if (rel == "/") rel.clear();
  return mount + rel;
}

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

// dir, its parent, ... up to and including mount.
std::vector<std::string> dirs_up_to(const std::string& dir, const std::string& mount) {
  std::vector<std::string> dirs{dir};
  std::string d = dir;
  while (d.size() > mount.size()) {
    const size_t slash = d.rfind('/');
    if (slash == std::string::npos || slash < mount.size()) break;
    d.resize(slash);
    dirs.push_back(d);
  }
  if (dirs.back() != mount && !mount.empty()) dirs.push_back(mount);
  return dirs;
}

void take_min(std::optional<int>& limit, std::optional<int> value) {
  if (value && (!limit || *value < *limit)) limit = value;
}

}  // namespace

int parse_thread_count(std::string_view text) {
  const std::optional<long long> n = parse_integer(text);
  if (!n || *n < 1 || *n > kMaxThreads) {
    throw ConfigError(kThreadsEnv, std::string(text),
                      str_cat("a whole number of threads from 1 to ", kMaxThreads,
                              " (unset it to use the CPUs this process may use)"));
  }
  return static_cast<int>(*n);
}

bool parse_pin(std::string_view text) {
  const std::string_view t = trim(text);
  if (t.empty() || t == "0") return false;
  if (t == "1") return true;
  throw ConfigError(
      kPinEnv, std::string(text),
      "1 (pin thread i to the i-th CPU this process may use) or 0 / unset (no pinning)");
}

int cpus_from_quota(long long quota_us, long long period_us) {
  if (quota_us <= 0 || period_us <= 0) return 1;
  return static_cast<int>(std::clamp<long long>(quota_us / period_us, 1, kMaxThreads));
}

std::optional<int> parse_cpu_max(std::string_view contents) {
  const std::vector<std::string_view> words = split_words(trim(contents));
  if (words.empty() || words[0] == "max") return std::nullopt;
  const std::optional<long long> quota = parse_integer(words[0]);
  // The period is optional in what the kernel accepts; it defaults to 100 ms.
  const std::optional<long long> period = words.size() > 1 ? parse_integer(words[1]) : 100000;
  if (!quota || !period || *quota <= 0 || *period <= 0) return std::nullopt;
  return cpus_from_quota(*quota, *period);
}

std::optional<int> parse_cfs_quota(std::string_view quota, std::string_view period) {
  const std::optional<long long> q = parse_integer(quota);
  const std::optional<long long> p = parse_integer(period);
  if (!q || !p || *q <= 0 || *p <= 0) return std::nullopt;  // -1 = no quota
  return cpus_from_quota(*q, *p);
}

CgroupPaths find_cgroup_paths(std::string_view proc_self_cgroup, std::string_view mountinfo) {
  std::string v2_path, v1_path;
  bool has_v2 = false, has_v1 = false;
  for (std::string_view line : split(proc_self_cgroup, '\n')) {
    const size_t a = line.find(':'), b = a == std::string_view::npos ? a : line.find(':', a + 1);
    if (b == std::string_view::npos) continue;
    const std::string_view id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1);
    const std::string path(trim(line.substr(b + 1)));
    if (id == "0" && controllers.empty()) has_v2 = true, v2_path = path;
    if (has_token(controllers, "cpu")) has_v1 = true, v1_path = path;
  }
  CgroupPaths out;
  for (std::string_view line : split(mountinfo, '\n')) {
    const std::vector<std::string_view> f = split_words(line);
    const auto dash = std::find(f.begin(), f.end(), "-");
    if (f.size() < 5 || dash == f.end() || f.end() - dash < 4) continue;
    const std::string_view fstype = dash[1], super_options = dash[3];
    const std::string root = unescape_octal(f[3]), mount = unescape_octal(f[4]);
    if (fstype == "cgroup2" && has_v2 && out.v2_mount.empty()) {
      out.v2_mount = mount;
      out.v2_dir = cgroup_dir(mount, root, v2_path);
    } else if (fstype == "cgroup" && has_v1 && out.v1_cpu_mount.empty() &&
               has_token(super_options, "cpu")) {
      out.v1_cpu_mount = mount;
      out.v1_cpu_dir = cgroup_dir(mount, root, v1_path);
    }
  }
  return out;
}

std::optional<int> cgroup_cpu_limit(const CgroupPaths& paths, const std::string& fs_root) {
  std::optional<int> limit;
  if (!paths.v2_dir.empty()) {
    for (const std::string& dir : dirs_up_to(paths.v2_dir, paths.v2_mount)) {
      if (auto text = read_text(fs_root + dir + "/cpu.max")) take_min(limit, parse_cpu_max(*text));
    }
  }
  if (!paths.v1_cpu_dir.empty()) {
    for (const std::string& dir : dirs_up_to(paths.v1_cpu_dir, paths.v1_cpu_mount)) {
      const auto quota = read_text(fs_root + dir + "/cpu.cfs_quota_us");
      const auto period = read_text(fs_root + dir + "/cpu.cfs_period_us");
      if (quota && period) take_min(limit, parse_cfs_quota(*quota, *period));
    }
  }
  return limit;
}

std::vector<int> allowed_cpus() {
  for (int max_cpus = 1024; max_cpus <= (1 << 20); max_cpus *= 4) {
    cpu_set_t* set = CPU_ALLOC(max_cpus);
    const size_t size = CPU_ALLOC_SIZE(max_cpus);
    CPU_ZERO_S(size, set);
    if (sched_getaffinity(0, size, set) == 0) {
      std::vector<int> cpus;
      for (int cpu = 0; cpu < max_cpus; ++cpu)
        if (CPU_ISSET_S(cpu, size, set)) cpus.push_back(cpu);
      CPU_FREE(set);
      return cpus;
    }
    const int error = errno;
    CPU_FREE(set);
    if (error != EINVAL) break;  // EINVAL: the mask is larger than max_cpus
  }
  return {};
}

CpuBudget read_cpu_budget() {
  CpuBudget budget;
  budget.allowed = allowed_cpus();
  const std::optional<std::string> cgroup = read_text("/proc/self/cgroup");
  const std::optional<std::string> mountinfo = read_text("/proc/self/mountinfo");
  if (cgroup && mountinfo)
    budget.quota_cpus = cgroup_cpu_limit(find_cgroup_paths(*cgroup, *mountinfo));
  budget.usable = std::max<int>(1, static_cast<int>(budget.allowed.size()));
  if (budget.quota_cpus) budget.usable = std::min(budget.usable, *budget.quota_cpus);
  return budget;
}

ThreadCountChoice choose_thread_count(const std::optional<std::string>& override_text, int usable,
                                      const char* source) {
  ThreadCountChoice choice;
  usable = std::max(usable, 1);
  choice.num_threads = override_text ? parse_thread_count(*override_text) : usable;
  choice.oversubscribed = choice.num_threads > usable;
  if (choice.oversubscribed) {
    choice.warning =
        str_cat("specdec: ", source, "=", choice.num_threads, " is more than the ", usable,
                " CPUs this process may use; the CPU thread pool will block "
                "instead of spinning while it waits (slower barriers)");
  }
  return choice;
}

std::optional<std::string> env_value(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

}  // namespace specdec::cpu
