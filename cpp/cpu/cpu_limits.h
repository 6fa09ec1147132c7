#pragma once
// How many CPUs this process may use, and the environment settings of the CPU device's thread
// pool. A spinning pool must never run more threads than CPUs (8 spinning threads on 4 cores ran
// ~100x slower in llama.cpp), so the default thread count is the affinity mask's CPU count capped
// by the cgroup CPU quota (v2 `cpu.max`, v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`).
// Every parser takes the text (file contents or variable value), so tests need no real cgroup
// and no environment.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace specdec::cpu {

inline constexpr int kMaxThreads = 1024;
inline constexpr const char* kThreadsEnv = "SPECDEC_CPU_THREADS";
inline constexpr const char* kPinEnv = "SPECDEC_CPU_PIN";

// SPECDEC_CPU_THREADS: an integer 1..kMaxThreads. Throws ConfigError naming the variable, the value
// and what is allowed (junk, 0, negative, above kMaxThreads).
int parse_thread_count(std::string_view text);
// SPECDEC_CPU_PIN: "0" / "1" (also "" = off). Throws ConfigError otherwise.
bool parse_pin(std::string_view text);

// The CPUs a quota of quota_us per period_us grants, rounded down and at least 1 (a spinning
// thread beyond the quota is throttled for the rest of the period, so no rounding up).
int cpus_from_quota(long long quota_us, long long period_us);
// The contents of a cgroup v2 `cpu.max` ("max 100000" or "150000 100000"): nullopt when
// unlimited or unreadable.
std::optional<int> parse_cpu_max(std::string_view contents);
// The contents of cgroup v1 `cpu.cfs_quota_us` ("-1" = unlimited) and `cpu.cfs_period_us`.
std::optional<int> parse_cfs_quota(std::string_view quota, std::string_view period);

// Where this process's CPU controller lives, from /proc/self/cgroup and /proc/self/mountinfo.
struct CgroupPaths {
  std::string v2_dir;      // the process's cgroup v2 directory ("" when none)
  std::string v2_mount;    // the cgroup2 mount point above it
  std::string v1_cpu_dir;  // the process's cgroup v1 `cpu` controller directory ("" when none)
  std::string v1_cpu_mount;
};
CgroupPaths find_cgroup_paths(std::string_view proc_self_cgroup, std::string_view mountinfo);

// The smallest CPU quota on the way from the process's cgroup up to the mount point, v2 and v1;
// nullopt when nothing is limited. Every file is read under fs_root ("" = the real root; tests
// pass a folder of fake files).
std::optional<int> cgroup_cpu_limit(const CgroupPaths& paths, const std::string& fs_root = "");

// The CPUs of this process's affinity mask (sched_getaffinity), in order.
std::vector<int> allowed_cpus();

struct CpuBudget {
  std::vector<int> allowed;       // the affinity mask's CPUs
  std::optional<int> quota_cpus;  // the cgroup quota, if any
  int usable = 1;                 // allowed.size() capped by quota_cpus, at least 1
};
// The real process's budget (affinity mask, /proc/self/cgroup, /proc/self/mountinfo).
CpuBudget read_cpu_budget();

// The pool's thread count: the override's value when given (SPECDEC_CPU_THREADS), else usable.
// An override above usable is allowed (tests, experiments): `oversubscribed` is set, the pool then
// does not spin (its waits block at once), and `warning` says so in one line.
struct ThreadCountChoice {
  int num_threads = 1;
  bool oversubscribed = false;
  std::string warning;  // "" unless oversubscribed
};
// `source` names where the override came from, in the warning.
ThreadCountChoice choose_thread_count(const std::optional<std::string>& override_text, int usable,
                                      const char* source = kThreadsEnv);

// An environment variable's value, nullopt when unset.
std::optional<std::string> env_value(const char* name);

}  // namespace specdec::cpu
