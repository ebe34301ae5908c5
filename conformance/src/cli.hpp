// deepx-certify's command line: the options and their parsing (CLI11). The options are
// documented in conformance/README.md and by `deepx-certify --help`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <set>
#include <string>
#include <vector>

namespace deepx::conformance {

inline constexpr int kExitCertified = 0, kExitFailures = 1, kExitHarness = 2;
// Goes on with the run (parse_command_line's "no exit status yet").
inline constexpr int kContinue = -1;

struct Options {
  std::string plugin;
  std::string reference = "reference";
  std::string out_dir = "deepx-certification";
  std::set<std::string> ops;
  uint64_t seed = 1;
  bool seed_given = false;
  std::vector<std::string> manifests;
  std::string single_case;
  bool quiet = false;    // no progress, no "reports:" line
  bool verbose = false;  // also the op x dtype matrix and the worst-error table
  bool list_only = false;
  double timeout_s = 10.0;
  bool isolate = true;
  std::string certificate_path;  // default: <out>/certificate
  std::string sign_key;          // --sign: the Ed25519 private key (PEM) that signs the certificate
  bool perf = false;
  bool fd_check = false;  // self-check: the reference's backward against finite differences
  bool print_tolerances = false;
  bool exec_workers = false;  // workers are fresh processes (exec), not forks of the loaded runner
  size_t jobs = 1;
  // Internal: this process is an exec'd worker (see --exec-workers); not shown by --help.
  int worker_fd = -1;
  size_t worker_start = 0, worker_end = 0;
  std::string worker_hash;
};

// Parses argv into `options`. Returns kContinue to go on with the run, or the exit status to end
// with: 0 after --help (the help on `out`), kExitHarness after a usage error (the error, the
// synopsis and a hint on `err`).
int parse_command_line(int argc, const char* const* argv, Options& options, std::ostream& out, std::ostream& err);

}  // namespace deepx::conformance
