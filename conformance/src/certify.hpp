// The orchestration of one deepx-certify run: load the plugin and the reference, expand the
// manifests into cases, run them (isolated, runner.hpp / isolation.hpp), judge the verdict,
// print the summary (terminal.hpp), write the reports (reports.hpp) and the certificate, and
// optionally time the kernels (perf.hpp).
#pragma once

#include <string>
#include <vector>

#include "cli.hpp"

namespace deepx::conformance {

// Runs the certification `options` describe. `argv` is the runner's own command line: exec'd
// workers (--exec-workers) are started with it. Returns the exit status: kExitCertified,
// kExitFailures, or kExitHarness (a usage or harness error, explained on stderr).
int certify(const Options& options, const std::vector<std::string>& argv);

}  // namespace deepx::conformance
