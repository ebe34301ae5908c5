#include "certify.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "certificate.h"
#include "concurrency.hpp"
#include "diagnosis.hpp"
#include "deepx/host.h"
#include "digest.hpp"
#include "isolation.hpp"
#include "perf.hpp"
#include "reports.hpp"
#include "terminal.hpp"

namespace deepx::conformance {
namespace {

namespace fs = std::filesystem;

constexpr const char* kNothingClaimed = "NOTHING CLAIMED";

std::string executable_dir() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : p.parent_path().string();
}

// This runner's own executable, absolute ("deepx-certify" when /proc/self/exe cannot be read).
std::string absolute_runner() {
  std::error_code ec;
  const auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("deepx-certify") : p.string();
}

// The bundled manifests: next to an installed executable, else the source tree.
std::vector<std::string> default_manifest_dirs() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("DEEPX_CONFORMANCE_CASES")) dirs.push_back(env);
  dirs.push_back(executable_dir() + "/../" DEEPX_CONFORMANCE_INSTALL_DATADIR "/deepx/conformance");
  dirs.push_back(DEEPX_CONFORMANCE_SOURCE_CASES_DIR);
  dirs.push_back(DEEPX_CONFORMANCE_INSTALL_CASES_DIR);
  return dirs;
}

std::vector<std::string> manifest_files(const std::string& path) {
  std::vector<std::string> files;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.path().extension() == ".txt") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  return files;
}

bool read_text(const std::string& path, std::string& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string hex64(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string iso_time() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string host_description() {
  struct utsname u{};
  std::string h;
  if (uname(&u) == 0) h = std::string(u.nodename) + " " + u.sysname + " " + u.release + " " + u.machine;
  return h;
}

// The kernel a case runs: op, full signature, device.
std::string kernel_key(const Case& c) { return c.op + " " + c.sig + " " + c.device; }
std::string kernel_key(const Claim& c) { return c.op + " " + c.sig + " " + c.device; }

struct Loaded {
  int32_t index = -1;
  dx_plugin_info_t info{};
};

bool plugin_info(dx_runtime_t* rt, int32_t index, dx_plugin_info_t& info) {
  info = dx_plugin_info_t{};
  info.struct_size = DX_PLUGIN_INFO_SIZE_1_0;
  return take_status(dx_runtime_plugin_info(rt, index, &info)) == DX_OK;
}

// Loads a plugin; if one of that name or path is already loaded (the reference certifying
// itself), returns the loaded one.
bool load(dx_runtime_t* rt, const std::string& name_or_path, Loaded& out, std::string& error) {
  int32_t index = -1;
  std::string message;
  const dx_status_t s = take_status(dx_runtime_load_plugin(rt, name_or_path.c_str(), &index), &message);
  if (s == DX_OK) {
    out.index = index;
    return plugin_info(rt, index, out.info);
  }
  if (s == DX_ALREADY_EXISTS) {
    int32_t count = 0;
    if (take_status(dx_runtime_plugin_count(rt, &count)) != DX_OK) count = 0;
    std::error_code ec;
    const auto wanted = fs::weakly_canonical(name_or_path, ec).string();
    for (int32_t i = 0; i < count; ++i) {
      dx_plugin_info_t info;
      if (!plugin_info(rt, i, info)) continue;
      if (name_or_path == info.name || (info.path && wanted == info.path) ||
          message.find(std::string("'") + info.name + "'") != std::string::npos) {
        out.index = i;
        out.info = info;
        return true;
      }
    }
    if (count == 1) {  // only one plugin could be the duplicate
      out.index = 0;
      return plugin_info(rt, 0, out.info);
    }
  }
  error = "cannot load plugin '" + name_or_path + "': " + dx_status_string(s) + ": " + message;
  return false;
}

PluginIdentity identity(const Loaded& l) {
  auto text = [](const char* s) { return std::string(s ? s : ""); };
  PluginIdentity p;
  p.name = text(l.info.name);
  p.vendor = text(l.info.vendor);
  p.version = text(l.info.version);
  p.build_id = text(l.info.build_id);
  p.path = text(l.info.path);
  p.abi_version = static_cast<int64_t>(l.info.abi_version);
  p.sha256 = p.path.empty() ? "" : sha256_file(p.path).value_or("");
  return p;
}

// The cases of the run: one --case line, else the manifests (--manifest or the bundled ones),
// kept to --ops; with --fd-check, one finite-difference case per f64 real-tier backward case.
// False (with `error`) for a manifest that cannot be found, read or parsed.
bool collect_cases(const Options& opt, const Environment& env, std::vector<Case>& cases,
                   std::vector<std::string>& manifest_list, std::string& error) {
  const SignaturesFn claims = [&](const std::string& op, bool from_reference) {
    std::vector<SigOption> out;
    std::set<std::string> seen;
    const auto& map = from_reference ? env.reference_claims : env.plugin_claims;
    auto it = map.find(op);
    if (it != map.end())
      for (const auto& c : it->second)
        if (seen.insert(c.sig + "@" + c.device).second) out.push_back({c.dtype, c.device, c.sig, c.has_backward});
    return out;
  };
  try {
    if (!opt.single_case.empty()) {
      Family f = parse_family(opt.single_case, "--case");
      cases = expand(f, claims, ExpandOptions{});
      if (cases.size() != 1) {
        error = "--case must describe exactly one case; it expands to " + std::to_string(cases.size());
        return false;
      }
    } else {
      std::vector<std::string> sources = opt.manifests;
      if (sources.empty()) {
        for (const auto& dir : default_manifest_dirs()) {
          std::error_code ec;
          if (fs::is_directory(dir, ec) && !manifest_files(dir).empty()) {
            sources.push_back(dir);
            break;
          }
        }
        if (sources.empty()) {
          error = "no bundled manifests found; pass --manifest";
          return false;
        }
      }
      std::set<std::string> seen;
      for (const auto& src : sources)
        for (const auto& file : manifest_files(src)) {
          std::string text;
          if (!read_text(file, text)) {
            error = "cannot read manifest " + file;
            return false;
          }
          manifest_list.push_back(file);
          for (const auto& fam : parse_manifest(text, fs::path(file).filename().string()))
            for (auto& c : expand(fam, claims, ExpandOptions{true}))
              if ((opt.ops.empty() || opt.ops.count(c.op)) && seen.insert(c.line()).second) cases.push_back(std::move(c));
        }
    }
  } catch (const ManifestError& e) {
    error = std::string("manifest error: ") + e.what();
    return false;
  }
  if (opt.fd_check) {
    // The check runs the reference's f64 kernels whatever the plugin under test is.
    std::vector<Case> fd;
    std::set<std::string> seen;
    for (auto c : cases) {
      if (c.mode != "fdcheck" && (!c.is_backward() || c.tier != "real" || c.dtype != "f64")) continue;
      c.mode = "fdcheck";
      c.layouts.assign(c.layouts.size(), "contig");
      c.out_layout = "contig";
      if (seen.insert(c.line()).second) fd.push_back(std::move(c));
    }
    cases = std::move(fd);
  }
  return true;
}

// Exec'd workers (--exec-workers): fresh processes started with the runner's own arguments plus
// where to start and where to write.
WorkerSpawner exec_spawner(const std::vector<std::string>& argv, const std::string& case_list_hash) {
  return [argv, case_list_hash](size_t first, size_t end, int write_fd) -> pid_t {
    constexpr int kWorkerFd = 3;
    std::vector<std::string> args = argv;
    for (const std::string& extra : {std::string("--worker-fd"), std::string("3"), std::string("--worker-start"),
                                     std::to_string(first), std::string("--worker-end"), std::to_string(end),
                                     std::string("--worker-hash"), case_list_hash})
      args.push_back(extra);
    std::vector<char*> cargs;
    for (auto& a : args) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    const pid_t pid = ::fork();
    if (pid != 0) return pid;
    // Child: only async-signal-safe calls until exec.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (write_fd == kWorkerFd) ::fcntl(write_fd, F_SETFD, 0);
    else if (::dup2(write_fd, kWorkerFd) < 0) ::_exit(87);
    ::execv("/proc/self/exe", cargs.data());
    ::_exit(88);
  };
}

// Totals, the profile (what the verdict certifies), the relaxations used and the worst errors.
void judge(const Options& opt, const Environment& env, const std::vector<Case>& cases, RunRecord& run) {
  for (const auto& o : run.outcomes) ++run.counts[o.r.status];
  for (Status s : kAllStatuses)
    if (is_failure(s)) run.failed += run.count(s);
  const bool complete = run.outcomes.size() == cases.size();
  run.certified = run.failed == 0 && complete && !cases.empty();

  for (const auto& [op, list] : env.plugin_claims) run.claims.insert(run.claims.end(), list.begin(), list.end());
  run.uncovered_claims = env.uncovered_claims;
  // Claims no case exercised: the profile must not include them silently.
  if (opt.single_case.empty()) {
    std::set<std::string> exercised;
    for (const auto& c : cases) exercised.insert(kernel_key(c));
    for (const auto& [op, list] : env.plugin_claims) {
      if (!opt.ops.empty() && !opt.ops.count(op)) continue;
      for (const auto& c : list)
        if (!exercised.count(kernel_key(c))) run.claims_without_cases.push_back(op + " " + c.sig + " " + c.device);
    }
  }

  // The profile: what the plugin claims that the suite covers and that cases of this run
  // exercised (at least one PASS or MISTRUSTED: a kernel whose every case its supports()
  // declined proved nothing). These are the certificate's kernels.
  std::set<std::string> exercised_kernels;
  for (const auto& o : run.outcomes)
    if ((o.r.status == Status::Pass || o.r.status == Status::Mistrusted) && o.c.mode == "forward")
      exercised_kernels.insert(kernel_key(o.c));
  std::set<std::string> profile_ops, profile_dtypes, profile_devices;
  for (const auto& [op, list] : env.plugin_claims)
    for (const auto& c : list) {
      if (!opt.ops.empty() && !opt.ops.count(op)) continue;
      if (!exercised_kernels.count(kernel_key(c))) continue;  // not part of what is certified
      run.profile_claims.push_back(c);
      profile_ops.insert(op);
      profile_dtypes.insert(c.dtype);
      profile_devices.insert(c.device);
    }
  run.profile_devices.assign(profile_devices.begin(), profile_devices.end());
  std::string devices;
  for (const auto& d : profile_devices) devices += (devices.empty() ? "" : ",") + d;
  char profile[256];
  std::snprintf(profile, sizeof profile, "%s: %zu ops x %zu dtypes on %s, %zu kernels, suite %s", run.plugin_name.c_str(),
                profile_ops.size(), profile_dtypes.size(), devices.empty() ? "-" : devices.c_str(),
                run.profile_claims.size(), kSuiteVersion);
  run.profile = profile;

  // Cases held to a relaxation instead of the published table (relaxations(), each with its
  // reason), and the relaxations they used: a verdict reached with any says so everywhere.
  for (const auto& o : run.outcomes)
    if (o.r.tolerance.relaxed && !is_failure(o.r.status)) {
      run.relaxed_items.push_back(o.id + " " + o.c.display_op() + " " + o.c.dtype + ": " + o.r.tolerance.source);
      ++run.relaxed_case_count[o.r.tolerance.source];
    }
  for (const auto& r : relaxations())
    if (run.relaxed_case_count.count(relaxation_source(r))) run.relaxations_used.push_back(&r);
  run.verdict = !run.certified ? "NOT CERTIFIED" : run.relaxed_items.empty() ? "CERTIFIED" : "CERTIFIED-with-relaxations";
  // A plugin that registers no kernel at all (the template): nothing failed and nothing can be
  // certified. It passes (exit 0) with a verdict of its own, and gets no certificate.
  if (cases.empty() && run.failed == 0 && env.plugin_claims.empty() && env.uncovered_claims.empty() &&
      opt.single_case.empty() && opt.ops.empty())
    run.verdict = kNothingClaimed;
  run.worst_errors = worst_errors(run.outcomes);
}

// The certificate: the verdict bound to the .so's SHA-256 and the certified kernels. Returns the
// line the summary prints (where it was written, or why there is none; empty when not certified).
std::string write_certificate(const Options& opt, const RunRecord& run) {
  const fs::path default_certificate = fs::path(opt.out_dir) / "certificate";
  const fs::path path = opt.certificate_path.empty() ? default_certificate : fs::path(opt.certificate_path);
  std::error_code ec;
  if (run.certified && !run.self_check && !run.plugin.sha256.empty() && run.count(Status::HarnessError) == 0) {
    std::string text = certificate_text(run);
    std::string signed_by;
    if (!opt.sign_key.empty()) {
      std::string why;
      std::optional<std::string> signed_text = deepx::cert::Sign(certificate_of(run), opt.sign_key, &why);
      if (!signed_text) return "no certificate: " + why;
      text = *signed_text;
      deepx::cert::Certificate parsed;
      if (deepx::cert::Parse(text, &parsed, &why)) signed_by = parsed.signed_by;
    }
    const fs::path tmp = path.string() + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << text;
      out.close();
      if (!out) {
        fs::remove(tmp, ec);
        return "cannot write " + tmp.string();
      }
    }
    fs::rename(tmp, path, ec);  // atomic: a reader never sees half a certificate
    if (ec) {
      fs::remove(tmp, ec);
      return "cannot write " + path.string() + ": " + ec.message();
    }
    std::string line = "certificate: " + path.string() + " (" + std::to_string(run.profile_claims.size()) +
                       " kernels, sha256 " + run.plugin.sha256 + ")";
    line += signed_by.empty()
                ? "\ncertificate: unsigned: a report only; no host grants it trust until it is signed (--sign KEY)"
                : "\ncertificate: signed by key " + signed_by;
    if (!run.relaxations_used.empty())
      line += "\ncertificate verdict: " + run.verdict + " (" + std::to_string(run.relaxations_used.size()) +
              " relaxations recorded in it)";
    return line;
  }
  // A certificate left by an earlier run must not outlive a failed one.
  fs::remove(default_certificate, ec);
  if (!opt.certificate_path.empty()) fs::remove(path, ec);
  if (run.verdict == kNothingClaimed) return "no certificate: the plugin claims no kernel, so there is nothing to certify";
  if (run.certified && run.self_check) return "no certificate for a self-check of the reference";
  if (run.certified) return "no certificate: the plugin's library could not be hashed";
  return {};
}

}  // namespace

int certify(const Options& opt, const std::vector<std::string>& argv) {
  // The suite runs kernels precisely because they are not certified yet: the trust gate
  // (DEEPX_REQUIRE_CERTIFIED) would refuse them.
  ::unsetenv("DEEPX_REQUIRE_CERTIFIED");
  // A signing key that cannot sign is found now, not after the whole suite ran.
  if (!opt.sign_key.empty() && opt.worker_fd < 0 && !opt.list_only) {
    std::string why;
    if (!deepx::cert::Sign(deepx::cert::Certificate{}, opt.sign_key, &why)) {
      std::fprintf(stderr, "deepx-certify: --sign: %s\n", why.c_str());
      return kExitHarness;
    }
  }
  // Loading runs plugin code (its init) too: try it once in a throwaway process, so a plugin
  // that crashes or hangs while loading is reported rather than taking the runner down.
  if (opt.isolate && opt.worker_fd < 0) {
    const std::string died = run_in_child(
        [&] {
          dx_runtime_t* probe = nullptr;
          if (take_status(dx_runtime_create(nullptr, &probe)) != DX_OK) return;
          Loaded p, r;
          std::string ignored;  // load errors are reported by the real load below
          load(probe, opt.plugin, p, ignored);
          load(probe, opt.reference, r, ignored);
        },
        60.0);
    if (!died.empty()) {
      std::fprintf(stderr, "deepx-certify: loading the plugins crashed or hung (%s): not certified\n", died.c_str());
      return kExitHarness;
    }
  }
  dx_runtime_t* rt = nullptr;
  std::string error;
  if (take_status(dx_runtime_create(nullptr, &rt), &error) != DX_OK) {
    std::fprintf(stderr, "deepx-certify: cannot create a runtime: %s\n", error.c_str());
    return kExitHarness;
  }
  struct RuntimeGuard {
    dx_runtime_t* rt;
    ~RuntimeGuard() { dx_error_destroy(dx_runtime_destroy(rt)); }
  } guard{rt};

  Loaded plugin, reference;
  // The libraries the plugin brings: those loaded by loading it (before the reference is), those
  // it names as DT_NEEDED (the runner may have loaded one already, as it does OpenBLAS), and the
  // C library (glibc's libm decides the numbers of exp, log, ...). Recorded in the certificate.
  const std::vector<deepx::cert::Library> before = deepx::cert::LoadedLibraries();
  const bool plugin_loaded = load(rt, opt.plugin, plugin, error);
  std::vector<std::pair<std::string, std::string>> libraries;
  if (plugin_loaded) {
    std::set<std::string> had;
    for (const auto& l : before) had.insert(l.name);
    const std::string own = plugin.info.path ? fs::path(plugin.info.path).filename().string() : std::string();
    std::set<std::string> needed = {"libc.so.6"};
    deepx::cert::DynamicSection dynamic;
    const int fd = plugin.info.path ? ::open(plugin.info.path, O_RDONLY | O_CLOEXEC) : -1;
    if (fd >= 0) {
      if (deepx::cert::ReadDynamicSection(fd, &dynamic)) needed.insert(dynamic.needed.begin(), dynamic.needed.end());
      ::close(fd);
    }
    for (const auto& l : deepx::cert::LoadedLibraries())
      if ((!had.count(l.name) || needed.count(l.name)) && l.name != own) libraries.emplace_back(l.name, l.version);
  }
  if (!plugin_loaded || !load(rt, opt.reference, reference, error)) {
    std::fprintf(stderr, "deepx-certify: %s\n", error.c_str());
    return kExitHarness;
  }
  RunRecord run;
  run.self_check = plugin.index == reference.index;
  run.plugin_name = plugin.info.name ? plugin.info.name : opt.plugin;

  Environment env;
  env.runtime = rt;
  env.plugin_index = plugin.index;
  env.reference_index = reference.index;
  env.seed = opt.seed;
  if (!env.discover(error)) {
    std::fprintf(stderr, "deepx-certify: %s\n", error.c_str());
    return kExitHarness;
  }

  std::vector<Case> cases;
  if (!collect_cases(opt, env, cases, run.manifests, error)) {
    std::fprintf(stderr, "deepx-certify: %s\n", error.c_str());
    return kExitHarness;
  }
  if (opt.list_only) {
    for (const auto& c : cases) std::printf("%s\n", c.line().c_str());
    return kExitCertified;
  }
  // A worker started by --exec-workers: the same arguments gave the same cases (checked).
  std::string case_list_hash;
  {
    std::string all;
    for (const auto& c : cases) all += c.line() + "\n";
    case_list_hash = hex64(fnv1a64(all)) + ":" + std::to_string(cases.size());
  }
  if (opt.worker_fd >= 0) {
    if (opt.worker_hash != case_list_hash || opt.worker_start > opt.worker_end || opt.worker_end > cases.size()) {
      std::fprintf(stderr, "deepx-certify worker: the case list differs from the runner's\n");
      ::_exit(86);
    }
    worker_main(env, cases, opt.worker_start, opt.worker_end, opt.worker_fd);
  }

  // The reproduction line runs from any directory: the runner and the plugins by absolute path
  // (the loaded files), except the default reference, which every install finds by name.
  std::string repro_prefix = shell_quote(absolute_runner()) + " " +
                             shell_quote(plugin.info.path && plugin.info.path[0] ? plugin.info.path : opt.plugin);
  if (opt.reference != "reference")
    repro_prefix += " --reference " +
                    shell_quote(reference.info.path && reference.info.path[0] ? reference.info.path : opt.reference);
  if (opt.seed_given) repro_prefix += " --seed " + std::to_string(opt.seed);
  if (opt.timeout_s != 10.0) {
    char t[32];
    std::snprintf(t, sizeof t, "%g", opt.timeout_s);
    repro_prefix += std::string(" --timeout ") + t;
  }

  if (!opt.quiet) {
    std::fprintf(stderr, "deepx-certify: plugin %s %s build %s (%s), reference %s, %zu cases, seed %llu\n",
                 run.plugin_name.c_str(), plugin.info.version ? plugin.info.version : "",
                 plugin.info.build_id && plugin.info.build_id[0] ? plugin.info.build_id : "-",
                 plugin.info.path ? plugin.info.path : "",
                 reference.info.name ? reference.info.name : opt.reference.c_str(), cases.size(),
                 static_cast<unsigned long long>(opt.seed));
    if (run.self_check)
      std::fprintf(stderr,
                   "deepx-certify: note: the plugin under test is the reference itself: this checks that it loads\n"
                   "               and that every case runs, not that its results are right.\n");
  }

  // ---- run ----
  const auto run_start = std::chrono::steady_clock::now();
  // Filled by case index: with --jobs, results of different ranges arrive interleaved.
  std::vector<Outcome> slots(cases.size());
  std::vector<bool> filled(cases.size(), false);
  size_t done = 0, failures_so_far = 0;
  Progress progress(stderr, !opt.quiet, cases.size(), isatty(STDERR_FILENO) != 0);
  const auto record = [&](size_t index, CaseResult r) {
    if (index >= slots.size() || filled[index]) return;
    const Case& c = cases[index];
    Outcome o;
    o.c = c;
    o.r = std::move(r);
    o.id = hex64(fnv1a64(c.line())).substr(0, 12);
    o.repro = repro_prefix + " --case " + shell_quote(c.line());
    if (is_failure(o.r.status)) ++failures_so_far;
    slots[index] = std::move(o);
    filled[index] = true;
    ++done;
    progress.update(done, c, failures_so_far);
  };
  bool exec_workers = opt.exec_workers;
  for (const auto& [op, list] : env.plugin_claims)
    for (const auto& c : list) exec_workers |= c.device_type != 1 /* kDLCPU */;
  if (opt.isolate) {
    IsolationOptions iso;
    iso.case_timeout_s = opt.timeout_s;
    iso.jobs = opt.jobs;
    if (exec_workers) iso.spawn = exec_spawner(argv, case_list_hash);
    run.workers = run_cases_isolated(env, cases, iso, record);
  } else {
    for (size_t i = 0; i < cases.size(); ++i) record(i, execute_case(env, cases[i]));
  }
  // Results in case order; a case without one would make results < cases (not certified).
  run.outcomes.reserve(cases.size());
  for (size_t i = 0; i < slots.size(); ++i)
    if (filled[i]) run.outcomes.push_back(std::move(slots[i]));
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  run.cases = cases.size();
  run.isolated = opt.isolate;
  run.exec_workers = exec_workers;
  run.case_timeout_s = opt.timeout_s;
  run.seed = opt.seed;
  run.host = host_description();
  run.date = iso_time();
  run.commit = DEEPX_CONFORMANCE_COMMIT;
  run.plugin = identity(plugin);
  run.cpu = deepx::cert::CpuDescription();
  run.libraries = libraries;
  run.reference = identity(reference);
  if (run.reference.name.empty()) run.reference.name = opt.reference;

  judge(opt, env, cases, run);
  // Each failure's class in words; wrong values of non-compact cases rerun compact (isolated).
  diagnose(env, run.outcomes, opt.isolate && !exec_workers ? 200 : 0, 120.0);

  // ---- concurrency: a plugin that declares concurrent kernels gets them called at once ----
  const bool concurrent = (plugin.info.capabilities & DX_PLUGIN_CAP_CONCURRENT_KERNELS) != 0;
  if (concurrent && !run.self_check && opt.single_case.empty() && opt.isolate && !exec_workers) {
    // One forward case per kernel, the first that passed (not MISTRUSTED: it proves little).
    std::set<std::string> seen;
    std::vector<Case> picked;
    for (const auto& o : run.outcomes)
      if (o.c.mode == "forward" && o.r.status == Status::Pass && seen.insert(kernel_key(o.c)).second)
        picked.push_back(o.c);
    ConcurrencyOptions co;
    const ConcurrencyResult cr = check_concurrency(env, picked, co);
    run.concurrency_checked = true;
    run.concurrency_kernels = cr.kernels;
    run.concurrency_threads = co.threads;
    run.concurrency_failures = cr.failures;
    if (!cr.failures.empty()) {
      run.failed += cr.failures.size();
      run.certified = false;
      run.verdict = "NOT CERTIFIED";
      run.profile_claims.clear();
    }
  }

  // ---- terminal, reports, certificate ----
  print_details(stdout, run, opt.quiet, opt.verbose);
  for (const auto& f : run.concurrency_failures)
    std::printf("FAIL concurrency: %s\n    rerun: %s --ops %s\n", f.c_str(), repro_prefix.c_str(),
                shell_quote(f.substr(0, f.find(' '))).c_str());
  if (run.concurrency_checked)
    std::printf("concurrency: %zu kernels called from %zu threads at once (the plugin declares concurrent kernels), "
                "%zu failures\n",
                run.concurrency_kernels, run.concurrency_threads, run.concurrency_failures.size());
  std::error_code ec;
  fs::create_directories(opt.out_dir, ec);  // the default certificate goes there too
  SummaryText text;
  text.certificate = write_certificate(opt, run);
  if (!write_reports(run, opt.out_dir, error)) {
    std::fprintf(stderr, "deepx-certify: %s\n", error.c_str());
    return kExitHarness;
  }
  if (!opt.quiet) text.reports_dir = opt.out_dir;
  print_summary(stdout, run, text);

  // ---- performance mode ----
  if (opt.perf) {
    std::set<std::string> broken;  // kernels that crashed or hung: not timed
    for (const auto& o : run.outcomes)
      if (o.r.status == Status::Crash || o.r.status == Status::Timeout)
        broken.insert(o.c.op + " " + o.c.dtype + " " + o.c.device);
    PerfOptions po;
    // Perf forks the loaded runner; a runtime that does not survive fork (exec'd workers) is
    // timed in-process instead (the reports are already written).
    po.isolate = opt.isolate && !exec_workers;
    po.ops = opt.ops;
    po.skip = broken;
    std::fflush(stdout);
    run_perf(env, po);
  }

  if (run.count(Status::HarnessError)) return kExitHarness;
  return run.certified || run.verdict == kNothingClaimed ? kExitCertified : kExitFailures;
}

}  // namespace deepx::conformance
