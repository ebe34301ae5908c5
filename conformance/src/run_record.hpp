// One certification run's results, as the report writers (reports.hpp) and the terminal
// summary (terminal.hpp) read them. Filled by the orchestration (certify.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compare.hpp"
#include "manifest.hpp"
#include "report.hpp"
#include "runner.hpp"

namespace deepx::conformance {

inline constexpr const char* kSuiteVersion = "0.1.0";

// One case with its result.
struct Outcome {
  Case c;
  CaseResult r;
  std::string id;     // 12 hex digits of the canonical line's hash
  std::string repro;  // the command line that reruns just this case
  std::string diagnosis;  // a failure's class in words (diagnosis.hpp), or ""
};

// A loaded plugin as reports name it.
struct PluginIdentity {
  std::string name, vendor, version, build_id, path;
  std::string sha256;  // of the .so; empty when it cannot be read
  int64_t abi_version = 0;
};

struct RunRecord {
  PluginIdentity plugin, reference;
  std::string plugin_name;  // the plugin's name, else the command-line argument
  bool self_check = false;  // the reference compared with itself
  std::vector<std::string> manifests;
  uint64_t seed = 1;
  std::string host, date, commit;

  size_t cases = 0;               // expanded cases
  std::vector<Outcome> outcomes;  // in case order; fewer than `cases` when a result is missing
  std::map<Status, size_t> counts;
  size_t failed = 0;  // FAIL + UNIMPLEMENTED + HARNESS_ERROR + CRASH + TIMEOUT
  double seconds = 0;
  bool isolated = true;
  bool exec_workers = false;
  size_t workers = 0;  // worker processes started
  double case_timeout_s = 10;

  bool certified = false;
  // CERTIFIED, CERTIFIED-with-relaxations, NOT CERTIFIED, or NOTHING CLAIMED (the plugin
  // registers no kernel at all: it passes, and no certificate grants it anything).
  std::string verdict;
  std::string cpu;  // the CPU the cases ran on (certificate's `cpu` line)
  // The concurrency check (concurrency.hpp), for plugins declaring concurrent kernels.
  bool concurrency_checked = false;
  size_t concurrency_kernels = 0, concurrency_threads = 0;
  std::vector<std::string> concurrency_failures;
  // The libraries loaded with the plugin (name, version; certificate's `library` lines).
  std::vector<std::pair<std::string, std::string>> libraries;
  std::string profile;  // "cpu: 80 ops x 10 dtypes on cpu, 704 kernels, suite 0.1.0"
  std::vector<std::string> profile_devices;
  std::vector<Claim> claims;            // everything the plugin registered that the suite covers
  std::vector<Claim> profile_claims;    // what this run certifies: the certificate's kernels
  std::vector<Claim> uncovered_claims;  // claims of ops the suite has no rule for
  std::vector<std::string> claims_without_cases;  // claims no case of this run exercised

  std::vector<std::string> relaxed_items;  // "<id> <op> <dtype>: <threshold source>"
  std::vector<const Relaxation*> relaxations_used;
  std::map<std::string, size_t> relaxed_case_count;  // by threshold source
  std::vector<WorstError> worst_errors;              // one per op and output dtype

  size_t passed() const { return count(Status::Pass); }
  size_t count(Status s) const {
    auto it = counts.find(s);
    return it == counts.end() ? 0 : it->second;
  }
};

}  // namespace deepx::conformance
