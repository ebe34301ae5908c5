#include "cli.hpp"

#include <CLI/CLI.hpp>

#include "manifest.hpp"

namespace deepx::conformance {
namespace {

constexpr const char* kSynopsis =
    "usage: deepx-certify PLUGIN [--reference NAME_OR_PATH] [--out DIR] [--ops OP,OP...]\n"
    "                     [--seed N] [--manifest FILE_OR_DIR]... [--case 'LINE'] [--list] [--quiet] [--verbose]\n"
    "                     [--timeout SEC] [--no-isolation] [--jobs N] [--exec-workers]\n"
    "                     [--certificate PATH] [--sign KEY] [--perf] [--fd-check] [--print-tolerances]\n";

constexpr const char* kDescription =
    "Certifies PLUGIN (a plugin name such as \"cpu\", or a path to its .so) against the reference\n"
    "plugin: runs every manifest case for every (op, dtype, device) the plugin claims, compares\n"
    "with the reference under the published tolerance table, and writes report.json, junit.xml\n"
    "and report.html into --out (default ./deepx-certification), and a certificate when the\n"
    "plugin is certified; with --sign KEY (a key from `deepx keygen`) the certificate is signed,\n"
    "which a host requiring certification needs before it trusts any kernel.";

}  // namespace

int parse_command_line(int argc, const char* const* argv, Options& o, std::ostream& out, std::ostream& err) {
  CLI::App app{kDescription, "deepx-certify"};
  app.footer("Exit status: 0 certified, 1 not certified, 2 usage or harness error.");
  // An option given twice: the last one counts (as a shell user expects).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);

  std::vector<std::string> ops, manifests;
  bool no_isolation = false;
  app.add_option("PLUGIN", o.plugin, "the plugin under test: a name (cpu) or a path to its .so");
  app.add_option("--reference", o.reference, "the reference plugin (default \"reference\")")->type_name("NAME_OR_PATH");
  app.add_option("--out", o.out_dir, "where the reports go (default ./deepx-certification)")->type_name("DIR");
  app.add_option("--ops", ops, "only these ops (comma-separated; repeatable)")
      ->type_name("OP,OP...")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  CLI::Option* seed = app.add_option("--seed", o.seed, "data seed (default 1)")
                          ->type_name("N")
                          ->check(CLI::Validator(
                              [](std::string& v) -> std::string {
                                // strtoull would take "-1" as 2^64 - 1: digits only.
                                if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos)
                                  return "takes a non-negative integer, not '" + v + "'";
                                return {};
                              },
                              "", "non-negative integer"));
  app.add_option("--manifest", manifests,
                 "a manifest file, or a directory of *.txt manifests; repeatable; replaces the bundled manifests")
      ->type_name("FILE_OR_DIR")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--case", o.single_case, "run exactly one case (a line printed as a reproduction line)")
      ->type_name("'LINE'");
  app.add_flag("--list", o.list_only, "print the expanded cases and exit");
  app.add_flag("-q,--quiet", o.quiet, "no progress and no reports line");
  app.add_flag("-v,--verbose", o.verbose,
               "also print the op x dtype matrix and the worst errors per op and dtype (always in the reports)");
  app.add_option("--timeout", o.timeout_s, "per-case time limit in seconds (default 10); a case past it is TIMEOUT")
      ->type_name("SEC")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            double t = 0;
            if (!CLI::detail::lexical_cast(v, t) || !(t > 0) || t > 1e6)
              return "takes a positive number of seconds (at most 1e6), not '" + v + "'";
            return {};
          },
          "", "positive seconds"));
  app.add_flag("--no-isolation", no_isolation, "run kernels in the runner's own process (a crash ends the run; for debuggers)");
  app.add_option("-j,--jobs", o.jobs, "N worker processes at once (1 to 256, default 1), each on a range of cases")
      ->type_name("N")
      ->check(CLI::Range(1, 256).description(""));
  app.add_flag("--exec-workers", o.exec_workers,
               "run cases in freshly started processes that load the plugins themselves (automatic when the plugin "
               "claims a non-CPU device: GPU runtimes do not survive fork)");
  app.add_option("--certificate", o.certificate_path, "write the certificate there instead of <out>/certificate")
      ->type_name("PATH");
  app.add_option("--sign", o.sign_key,
                 "sign the certificate with this Ed25519 private key (PEM, from `deepx keygen`; mode 0600)")
      ->type_name("KEY");
  app.add_flag("--perf", o.perf, "also time each claimed kernel on large cases against the machine's measured ceilings");
  app.add_flag("--fd-check", o.fd_check,
               "self-check of the reference: its f64 backward kernels against central finite differences");
  app.add_flag("--print-tolerances", o.print_tolerances,
               "print the tolerance table as Markdown (docs/tolerances.md) and exit");
  // An exec'd worker's own arguments (--exec-workers): hidden (empty group).
  app.add_option("--worker-fd", o.worker_fd)->group("");
  app.add_option("--worker-start", o.worker_start)->group("");
  app.add_option("--worker-end", o.worker_end)->group("");
  app.add_option("--worker-hash", o.worker_hash)->group("");

  try {
    app.parse(argc, argv);
    if (o.plugin.empty() && !o.print_tolerances)
      throw CLI::ValidationError("PLUGIN is required (a plugin name such as cpu, or a path to its .so)");
  } catch (const CLI::CallForHelp&) {
    out << app.help();
    return kExitCertified;
  } catch (const CLI::ParseError& e) {
    err << "deepx-certify: " << e.what() << "\n" << kSynopsis << "Run 'deepx-certify --help' for every option.\n";
    return kExitHarness;
  }
  for (const auto& list : ops)
    for (auto& op : split_top_level(list, ',')) o.ops.insert(op);
  o.manifests = manifests;
  o.seed_given = seed->count() > 0;
  o.isolate = !no_isolation;
  return kContinue;
}

}  // namespace deepx::conformance
