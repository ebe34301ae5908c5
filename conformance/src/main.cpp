// deepx-certify: certifies a plugin against the reference plugin. See conformance/README.md.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "compare.hpp"
#include "deepx/host.h"
#include "dtype.hpp"
#include "html_report.hpp"
#include "isolation.hpp"
#include "manifest.hpp"
#include "perf.hpp"
#include "report.hpp"
#include "runner.hpp"
#include "sha256.h"  // deepx::sha256, shared with the host
#include "shape_rules.hpp"

namespace fs = std::filesystem;
using namespace deepx::conformance;
using deepx::util::sha256_file;

namespace {

constexpr const char* kSuiteVersion = "0.1.0";
constexpr int kExitCertified = 0, kExitFailures = 1, kExitHarness = 2;

struct Options {
  std::string plugin;
  std::string reference = "reference";
  std::string out_dir = "deepx-certification";
  std::set<std::string> ops;
  uint64_t seed = 1;
  bool seed_given = false;
  std::vector<std::string> manifests;
  std::string single_case;
  bool quiet = false;
  bool list_only = false;
  double timeout_s = 10.0;
  bool isolate = true;
  std::string certificate_path;  // default: <out>/certificate
  bool perf = false;
  bool fd_check = false;  // self-check: the reference's backward against finite differences
  bool print_tolerances = false;
  bool exec_workers = false;  // workers are fresh processes (exec), not forks of the loaded runner
  // Internal: this process is an exec'd worker (see --exec-workers).
  int worker_fd = -1;
  size_t worker_start = 0, worker_end = 0;
  size_t jobs = 1;
  std::string worker_hash;
};

void usage(FILE* f) {
  std::fprintf(f,
               "usage: deepx-certify PLUGIN [--reference NAME_OR_PATH] [--out DIR] [--ops OP,OP...]\n"
               "                     [--seed N] [--manifest FILE_OR_DIR]... [--case 'LINE'] [--list] [--quiet]\n"
               "                     [--timeout SEC] [--no-isolation] [--jobs N] [--exec-workers]\n"
               "                     [--certificate PATH] [--perf] [--fd-check] [--print-tolerances]\n"
               "\n"
               "Certifies PLUGIN (a plugin name such as \"cpu\", or a path to its .so) against the reference\n"
               "plugin: runs every manifest case for every (op, dtype, device) the plugin claims, compares\n"
               "with the reference under the published tolerance table, and writes report.json and\n"
               "junit.xml and report.html into --out (default ./deepx-certification), and a certificate\n"
               "when the plugin is certified.\n"
               "\n"
               "  --reference X   the reference plugin (default \"reference\")\n"
               "  --ops A,B       only these ops\n"
               "  --seed N        data seed (default 1)\n"
               "  --manifest F    a manifest file, or a directory of *.txt manifests; repeatable;\n"
               "                  replaces the bundled manifests\n"
               "  --case 'LINE'   run exactly one case (a line printed as a reproduction line)\n"
               "  --list          print the expanded cases and exit\n"
               "  --quiet         no progress, matrix or worst-error table\n"
               "  --timeout SEC   per-case time limit (default 10); a case past it is TIMEOUT\n"
               "  --no-isolation  run kernels in the runner's own process (a crash ends the run;\n"
               "                  for debuggers)\n"
               "  --certificate P write the certificate to P instead of <out>/certificate\n"
               "  --jobs N        N worker processes at once (default 1), each on a range of cases\n"
               "  --exec-workers  run cases in freshly started processes that load the plugins\n"
               "                  themselves (automatic when the plugin claims a non-CPU device:\n"
               "                  GPU runtimes do not survive fork)\n"
               "  --fd-check      self-check of the reference: its f64 backward kernels against\n"
               "                  central finite differences of its forward along random directions\n"
               "                  (one case per f64 real-tier backward case of the manifests)\n"
               "  --print-tolerances  print the tolerance table as Markdown (docs/tolerances.md) and exit\n"
               "  --perf          also time each claimed kernel on large cases against the\n"
               "                  machine's measured ceilings (memory bandwidth, BLAS)\n"
               "Exit status: 0 certified, 1 not certified, 2 usage or harness error.\n");
}

bool parse_args(int argc, char** argv, Options& o, std::string& error) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto next = [&](std::string& out) {
      if (i + 1 >= args.size()) {
        error = a + " needs a value";
        return false;
      }
      out = args[++i];
      return true;
    };
    std::string v;
    if (a == "--help" || a == "-h") {
      usage(stdout);
      std::exit(0);
    } else if (a == "--reference") {
      if (!next(o.reference)) return false;
    } else if (a == "--out") {
      if (!next(o.out_dir)) return false;
    } else if (a == "--ops") {
      if (!next(v)) return false;
      for (auto& op : split_top_level(v, ',')) o.ops.insert(op);
    } else if (a == "--seed") {
      if (!next(v)) return false;
      char* end = nullptr;
      o.seed = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || *end) {
        error = "--seed takes a non-negative integer";
        return false;
      }
      o.seed_given = true;
    } else if (a == "--manifest") {
      if (!next(v)) return false;
      o.manifests.push_back(v);
    } else if (a == "--case") {
      if (!next(o.single_case)) return false;
    } else if (a == "--quiet" || a == "-q") {
      o.quiet = true;
    } else if (a == "--list") {
      o.list_only = true;
    } else if (a == "--timeout") {
      if (!next(v)) return false;
      char* end = nullptr;
      o.timeout_s = std::strtod(v.c_str(), &end);
      if (v.empty() || *end || !(o.timeout_s > 0) || o.timeout_s > 1e6) {
        error = "--timeout takes a positive number of seconds";
        return false;
      }
    } else if (a == "--no-isolation") {
      o.isolate = false;
    } else if (a == "--certificate") {
      if (!next(o.certificate_path)) return false;
    } else if (a == "--perf") {
      o.perf = true;
    } else if (a == "--fd-check") {
      o.fd_check = true;
    } else if (a == "--print-tolerances") {
      o.print_tolerances = true;
      return true;
    } else if (a == "--exec-workers") {
      o.exec_workers = true;
    } else if (a == "--worker-fd" || a == "--worker-start" || a == "--worker-end" || a == "--jobs" || a == "-j") {
      if (!next(v)) return false;
      char* end = nullptr;
      const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
      if (v.empty() || *end) {
        error = a + " takes a non-negative integer";
        return false;
      }
      if (a == "--worker-fd") o.worker_fd = static_cast<int>(n);
      else if (a == "--worker-start") o.worker_start = static_cast<size_t>(n);
      else if (a == "--worker-end") o.worker_end = static_cast<size_t>(n);
      else if (n < 1 || n > 256) {
        error = "--jobs takes 1 to 256";
        return false;
      } else o.jobs = static_cast<size_t>(n);
    } else if (a == "--worker-hash") {
      if (!next(o.worker_hash)) return false;
    } else if (!a.empty() && a[0] == '-') {
      error = "unknown option " + a;
      return false;
    } else if (o.plugin.empty()) {
      o.plugin = a;
    } else {
      error = "more than one PLUGIN given ('" + o.plugin + "' and '" + a + "')";
      return false;
    }
  }
  if (o.plugin.empty()) {
    error = "PLUGIN is required";
    return false;
  }
  return true;
}

std::string executable_dir() {
  std::error_code ec;
  auto p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : p.parent_path().string();
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

bool read_file(const std::string& path, std::string& out) {
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

// One line of text: a reason with a line break must not start a new certificate line.
std::string single_line(std::string text) {
  for (char& ch : text)
    if (ch == '\n' || ch == '\r') ch = ' ';
  return text;
}

// The certificate the host parses (host/src/certificate.cc): keep the line format exactly. The
// host reads plugin, sha256 and kernel lines and ignores other keys; the verdict, the tolerance
// table's hash and every relaxation the verdict relied on (with its reason) are recorded for
// people and tools that read the certificate: a certificate with relaxations says so.
std::string certificate_text(const std::string& plugin, const std::string& sha256, const std::string& build,
                             const std::string& suite, const std::string& verdict,
                             const std::vector<const Relaxation*>& relaxations_used,
                             const std::vector<const Claim*>& kernels) {
  std::string t = "deepx-certificate 1\nplugin " + plugin + "\nsha256 " + sha256 + "\nsuite " + suite + "\n";
  // The build id that earned the verdict: one .so may serve several (the cpu plugin picks an
  // instruction-set variant at load), and the host honours the certificate only for this one.
  if (!build.empty() && build.find_first_of(" \t\r\n") == std::string::npos) t += "build " + build + "\n";
  t += "verdict " + verdict + "\n";
  t += "tolerance_table_sha256 " + tolerance_table_sha256() + "\n";
  for (const Relaxation* r : relaxations_used) t += single_line("relaxed " + relaxation_title(*r) + ": " + r->reason) + "\n";
  for (const Claim* c : kernels) {
    t += "kernel " + c->op + " " + std::to_string(c->device_type) + " ";
    for (size_t i = 0; i < c->signature.size(); ++i) t += (i ? "," : "") + std::to_string(c->signature[i]);
    t += "\n";
  }
  return t;
}

struct Outcome {
  Case c;
  CaseResult r;
  std::string id;
  std::string repro;
};

class Progress {
 public:
  Progress(bool quiet, size_t total) : quiet_(quiet), total_(total), tty_(isatty(STDERR_FILENO) != 0) {
    start_ = last_ = std::chrono::steady_clock::now();
  }
  void update(size_t done, const Case& c, size_t failures) {
    if (quiet_) return;
    const auto now = std::chrono::steady_clock::now();
    const bool last = done == total_;
    if (tty_) {
      if (!last && now - last_ < std::chrono::milliseconds(100)) return;
      last_ = now;
      std::string what = c.op + " " + c.dtype + " " + c.tier;
      std::fprintf(stderr, "\r\033[K[%zu/%zu] %zu failed  %s", done, total_, failures, what.c_str());
      if (last) std::fputc('\n', stderr);
    } else {
      if (!last && now - last_ < std::chrono::seconds(5) && done % 500 != 0) return;
      last_ = now;
      std::fprintf(stderr, "deepx-certify: %zu/%zu cases, %zu failed, %.1f s\n", done, total_, failures,
                   std::chrono::duration<double>(now - start_).count());
    }
    std::fflush(stderr);
  }

 private:
  bool quiet_;
  size_t total_;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_;
};

void write_case_json(JsonWriter& w, const Outcome& o, int64_t index) {
  const auto& r = o.r;
  w.begin_object();
  w.key("index").value(index);
  w.key("id").value(o.id);
  w.key("line").value(o.c.line());
  w.key("source").value(o.c.source);
  w.key("parameters").begin_object();
  w.key("op").value(o.c.op);
  w.key("display_op").value(o.c.display_op());
  w.key("mode").value(o.c.mode);
  w.key("dtype").value(o.c.dtype);
  w.key("signature").value(o.c.sig);
  w.key("device").value(o.c.device);
  w.key("shapes").begin_array();
  for (const auto& s : o.c.shapes) w.value(format_shape(s));
  w.end_array();
  w.key("layouts").begin_array();
  for (const auto& l : o.c.layouts) w.value(l);
  w.end_array();
  w.key("out_layout").value(o.c.out_layout);
  w.key("attrs").value(format_attrs(o.c.attrs));
  w.key("tier").value(o.c.tier);
  w.key("seed").value(o.c.seed);
  w.key("output_dtype").value(r.out_dtype);
  w.key("output_shape").value(format_shape(r.out_shape));
  w.end_object();
  w.key("status").value(status_name(r.status));
  w.key("reason").value(r.reason);
  w.key("reference_status").value(dx_status_string(r.reference_status));
  w.key("plugin_status").value(dx_status_string(r.plugin_status));
  if (r.compared) {
    const auto& cmp = r.comparison;
    w.key("errors").begin_object();
    w.key("elements").value(cmp.elements);
    w.key("mismatches").value(cmp.mismatches);
    w.key("unconstrained").value(cmp.unconstrained);
    w.key("max_abs").value(cmp.max_abs);
    w.key("max_rel").value(cmp.max_rel);
    w.key("max_ulp").value(cmp.max_ulp);
    w.key("worst_index").value(cmp.worst_index);
    w.key("worst_expected").value(cmp.worst_expected_text);
    w.key("worst_actual").value(cmp.worst_actual_text);
    w.key("worst_threshold").value(cmp.worst_threshold);
    w.end_object();
    w.key("threshold").value(r.tolerance.describe());
    w.key("threshold_source").value(r.tolerance.source);
    w.key("relaxed").value(r.tolerance.relaxed);
  }
  w.key("determinism_checked").value(r.determinism_checked);
  w.key("in_place_checked").value(r.in_place_checked);
  w.key("time_s").value(r.seconds);
  w.key("reference_time_s").value(r.reference_seconds);
  w.key("plugin_time_s").value(r.plugin_seconds);
  w.key("repro").value(o.repro);
  w.end_object();
}

// The kernel a case runs: op, full signature, device.
std::string kernel_key(const Case& c) { return c.op + " " + c.sig + " " + c.device; }
std::string kernel_key(const Claim& c) { return c.op + " " + c.sig + " " + c.device; }

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

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  std::string error;
  if (!parse_args(argc, argv, opt, error)) {
    std::fprintf(stderr, "deepx-certify: %s\n\n", error.c_str());
    usage(stderr);
    return kExitHarness;
  }
  if (opt.print_tolerances) {
    std::printf("%s", tolerance_table_markdown().c_str());
    return kExitCertified;
  }

  // The suite runs kernels precisely because they are not certified yet: the trust gate
  // (DEEPX_REQUIRE_CERTIFIED) would refuse them.
  ::unsetenv("DEEPX_REQUIRE_CERTIFIED");
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
  {
    std::string message;
    if (take_status(dx_runtime_create(nullptr, &rt), &message) != DX_OK) {
      std::fprintf(stderr, "deepx-certify: cannot create a runtime: %s\n", message.c_str());
      return kExitHarness;
    }
  }
  struct RuntimeGuard {
    dx_runtime_t* rt;
    ~RuntimeGuard() { dx_error_destroy(dx_runtime_destroy(rt)); }
  } guard{rt};

  Loaded plugin, reference;
  if (!load(rt, opt.plugin, plugin, error) || !load(rt, opt.reference, reference, error)) {
    std::fprintf(stderr, "deepx-certify: %s\n", error.c_str());
    return kExitHarness;
  }
  const bool self_check = plugin.index == reference.index;
  const std::string plugin_name = plugin.info.name ? plugin.info.name : opt.plugin;

  Environment env;
  env.runtime = rt;
  env.plugin_index = plugin.index;
  env.reference_index = reference.index;
  env.seed = opt.seed;
  if (!env.discover(error)) {
    std::fprintf(stderr, "deepx-certify: %s\n", error.c_str());
    return kExitHarness;
  }

  // ---- cases ----
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
  std::vector<Case> cases;
  std::vector<std::string> manifest_list;
  try {
    if (!opt.single_case.empty()) {
      Family f = parse_family(opt.single_case, "--case");
      cases = expand(f, claims, ExpandOptions{});
      if (cases.size() != 1) {
        std::fprintf(stderr, "deepx-certify: --case must describe exactly one case; it expands to %zu\n", cases.size());
        return kExitHarness;
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
          std::fprintf(stderr, "deepx-certify: no bundled manifests found; pass --manifest\n");
          return kExitHarness;
        }
      }
      std::set<std::string> seen;
      for (const auto& src : sources)
        for (const auto& file : manifest_files(src)) {
          std::string text;
          if (!read_file(file, text)) {
            std::fprintf(stderr, "deepx-certify: cannot read manifest %s\n", file.c_str());
            return kExitHarness;
          }
          manifest_list.push_back(file);
          for (const auto& fam : parse_manifest(text, fs::path(file).filename().string()))
            for (auto& c : expand(fam, claims, ExpandOptions{true}))
              if ((opt.ops.empty() || opt.ops.count(c.op)) && seen.insert(c.line()).second) cases.push_back(std::move(c));
        }
    }
  } catch (const ManifestError& e) {
    std::fprintf(stderr, "deepx-certify: manifest error: %s\n", e.what());
    return kExitHarness;
  }

  if (opt.fd_check) {
    // One finite-difference case per f64, real-tier backward case (the check runs the
    // reference's f64 kernels whatever the plugin under test is).
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

  std::string repro_prefix = "deepx-certify " + shell_quote(opt.plugin);
  if (opt.reference != "reference") repro_prefix += " --reference " + shell_quote(opt.reference);
  if (opt.seed_given) repro_prefix += " --seed " + std::to_string(opt.seed);

  if (!opt.quiet) {
    std::fprintf(stderr, "deepx-certify: plugin %s %s build %s (%s), reference %s, %zu cases, seed %llu\n",
                 plugin_name.c_str(), plugin.info.version ? plugin.info.version : "",
                 plugin.info.build_id && plugin.info.build_id[0] ? plugin.info.build_id : "-",
                 plugin.info.path ? plugin.info.path : "",
                 reference.info.name ? reference.info.name : opt.reference.c_str(), cases.size(),
                 static_cast<unsigned long long>(opt.seed));
    if (self_check)
      std::fprintf(stderr,
                   "deepx-certify: note: the plugin under test is the reference itself: this checks that it loads\n"
                   "               and that every case runs, not that its results are right.\n");
  }

  // ---- run ----
  const auto run_start = std::chrono::steady_clock::now();
  // Filled by case index: with --jobs, results of different ranges arrive interleaved.
  std::vector<Outcome> slots(cases.size());
  std::vector<bool> filled(cases.size(), false);
  size_t done = 0;
  Progress progress(opt.quiet, cases.size());
  size_t failures_so_far = 0;
  if (opt.timeout_s != 10.0) {
    char t[32];
    std::snprintf(t, sizeof t, "%g", opt.timeout_s);
    repro_prefix += std::string(" --timeout ") + t;
  }
  const auto record = [&](size_t index, CaseResult r) {
    const Case& c = cases[index];
    Outcome o;
    o.c = c;
    o.r = std::move(r);
    o.id = hex64(fnv1a64(c.line())).substr(0, 12);
    o.repro = repro_prefix + " --case " + shell_quote(c.line());
    if (is_failure(o.r.status)) ++failures_so_far;
    if (index < slots.size() && !filled[index]) {
      slots[index] = std::move(o);
      filled[index] = true;
      ++done;
    }
    progress.update(done, c, failures_so_far);
  };
  size_t workers = 0;
  bool exec_workers = opt.exec_workers;
  for (const auto& [op, list] : env.plugin_claims)
    for (const auto& c : list) exec_workers |= c.device_type != 1 /* kDLCPU */;
  if (opt.isolate) {
    IsolationOptions iso;
    iso.case_timeout_s = opt.timeout_s;
    iso.jobs = opt.jobs;
    if (exec_workers) {
      // Fresh processes: the runner's own arguments plus where to start and write.
      std::vector<std::string> base(argv, argv + argc);
      iso.spawn = [base, case_list_hash](size_t first, size_t end, int write_fd) -> pid_t {
        constexpr int kWorkerFd = 3;
        std::vector<std::string> args = base;
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
    workers = run_cases_isolated(env, cases, iso, record);
  } else {
    for (size_t i = 0; i < cases.size(); ++i) record(i, execute_case(env, cases[i]));
  }
  // Results in case order; a case without one would make results < cases (not certified).
  std::vector<Outcome> outcomes;
  outcomes.reserve(cases.size());
  for (size_t i = 0; i < slots.size(); ++i)
    if (filled[i]) outcomes.push_back(std::move(slots[i]));
  const double total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();

  // ---- totals ----
  std::map<Status, size_t> counts;
  for (const auto& o : outcomes) ++counts[o.r.status];
  size_t failed = 0;
  for (Status s : kAllStatuses)
    if (is_failure(s)) failed += counts[s];
  const size_t passed = counts[Status::Pass];
  const size_t results = outcomes.size();
  const bool complete = results == cases.size();
  const bool certified = failed == 0 && complete && !cases.empty();

  // Claims no case exercised: the profile must not include them silently.
  std::vector<std::string> claims_without_cases;
  if (opt.single_case.empty()) {
    std::set<std::string> exercised;
    for (const auto& c : cases) exercised.insert(kernel_key(c));
    for (const auto& [op, list] : env.plugin_claims) {
      if (!opt.ops.empty() && !opt.ops.count(op)) continue;
      for (const auto& c : list)
        if (!exercised.count(kernel_key(c))) claims_without_cases.push_back(op + " " + c.sig + " " + c.device);
    }
  }

  // The profile: what the plugin claims that the suite covers and that cases of this run
  // exercised (at least one PASS or MISTRUSTED: a kernel whose every case its supports()
  // declined proved nothing). These are the certificate's kernels.
  std::set<std::string> exercised_kernels;
  for (const auto& o : outcomes)
    if ((o.r.status == Status::Pass || o.r.status == Status::Mistrusted) && o.c.mode == "forward")
      exercised_kernels.insert(kernel_key(o.c));
  std::vector<const Claim*> profile_claims;
  std::set<std::string> profile_ops, profile_dtypes, profile_devices;
  size_t profile_kernels = 0;
  for (const auto& [op, list] : env.plugin_claims)
    for (const auto& c : list) {
      if (!opt.ops.empty() && !opt.ops.count(op)) continue;
      if (!exercised_kernels.count(kernel_key(c))) continue;  // not part of what is certified
      profile_claims.push_back(&c);
      profile_ops.insert(op);
      profile_dtypes.insert(c.dtype);
      profile_devices.insert(c.device);
      ++profile_kernels;
    }
  std::string devices;
  for (const auto& d : profile_devices) devices += (devices.empty() ? "" : ",") + d;
  char profile[256];
  std::snprintf(profile, sizeof profile, "%s: %zu ops x %zu dtypes on %s, %zu kernels, suite %s", plugin_name.c_str(),
                profile_ops.size(), profile_dtypes.size(), devices.empty() ? "-" : devices.c_str(), profile_kernels,
                kSuiteVersion);

  // Cases held to a relaxation instead of the published table (relaxations(), each with its
  // reason), and the relaxations they used: a verdict reached with any says so everywhere.
  std::vector<std::string> relaxed_items;
  std::map<std::string, size_t> relaxed_case_count;  // by threshold source
  for (const auto& o : outcomes)
    if (o.r.tolerance.relaxed && !is_failure(o.r.status)) {
      relaxed_items.push_back(o.id + " " + o.c.display_op() + " " + o.c.dtype + ": " + o.r.tolerance.source);
      ++relaxed_case_count[o.r.tolerance.source];
    }
  std::vector<const Relaxation*> relaxations_used;
  for (const auto& r : relaxations())
    if (relaxed_case_count.count(relaxation_source(r))) relaxations_used.push_back(&r);
  const std::string verdict_word = relaxed_items.empty() ? "CERTIFIED" : "CERTIFIED-with-relaxations";

  // ---- terminal summary ----
  FILE* so = stdout;
  if (!opt.quiet) {
    // op x dtype matrix
    std::vector<std::string> dtype_cols;
    for (const char* d : {"f64", "f32", "f16", "bf16", "i64", "i32", "i16", "i8", "u8", "bool"}) dtype_cols.push_back(d);
    struct Cell {
      size_t total = 0, ok = 0, bad = 0, ns = 0, died = 0;  // died: CRASH or TIMEOUT
    };
    std::map<std::string, std::map<std::string, Cell>> matrix;
    for (const auto& o : outcomes) {
      Cell& cell = matrix[o.c.display_op()][o.c.dtype];
      ++cell.total;
      if (o.r.status == Status::Crash || o.r.status == Status::Timeout) ++cell.died;
      if (is_failure(o.r.status)) ++cell.bad;
      else if (o.r.status == Status::NotSupported) ++cell.ns;
      else ++cell.ok;
    }
    std::fprintf(so, "\n%-24s", "op");
    for (const auto& d : dtype_cols) std::fprintf(so, " %9s", d.c_str());
    std::fprintf(so, "\n");
    for (const auto& [op, row] : matrix) {
      std::fprintf(so, "%-24s", op.c_str());
      for (const auto& d : dtype_cols) {
        auto it = row.find(d);
        std::string cell = ".";
        if (it != row.end()) {
          const Cell& c = it->second;
          if (c.died) cell = "CRASH " + std::to_string(c.bad);
          else if (c.bad) cell = "FAIL " + std::to_string(c.bad);
          else if (c.ok == 0) cell = "n/s";
          else cell = "ok " + std::to_string(c.ok);
        }
        std::fprintf(so, " %9s", cell.c_str());
      }
      std::fprintf(so, "\n");
    }
    std::fprintf(so,
                 "(ok N: cases passed or mistrusted; FAIL N: failing cases; CRASH N: failing cases, some crashed or\n"
                 " timed out; n/s: not supported; .: no cases)\n");

    // worst errors: the float cases with the largest ulp error, one per op x dtype
    std::map<std::string, const Outcome*> worst;
    for (const auto& o : outcomes) {
      if (!o.r.compared || !is_float(dtype_from_name(o.r.out_dtype).value_or(DType::I64))) continue;
      const std::string key = o.c.display_op() + " " + o.r.out_dtype;
      auto it = worst.find(key);
      if (it == worst.end() || o.r.comparison.max_ulp > it->second->r.comparison.max_ulp) worst[key] = &o;
    }
    if (!worst.empty()) {
      std::fprintf(so, "\nworst errors (per op and output dtype):\n");
      std::fprintf(so, "  %-30s %10s %10s %10s  %-12s %s\n", "op dtype", "max ulp", "max abs", "max rel", "case", "worst element");
      for (const auto& [key, o] : worst) {
        const auto& cmp = o->r.comparison;
        std::fprintf(so, "  %-30s %10llu %10.3g %10.3g  %-12s [%lld] expected %s got %s\n", key.c_str(),
                     static_cast<unsigned long long>(cmp.max_ulp), cmp.max_abs, cmp.max_rel, o->id.c_str(),
                     static_cast<long long>(cmp.worst_index), cmp.worst_expected_text.c_str(),
                     cmp.worst_actual_text.c_str());
      }
    }
    if (!env.uncovered_claims.empty()) {
      std::set<std::string> names;
      for (const auto& c : env.uncovered_claims) {
        std::string sig;
        for (size_t i = 0; i < c.signature.size(); ++i) sig += (i ? "," : "") + packed_name(c.signature[i]);
        names.insert(c.op + "(" + sig + ")");
      }
      std::string list;
      for (const auto& n : names) list += " " + n;
      std::fprintf(so, "\nclaimed but not covered by this suite version (not certified):%s\n", list.c_str());
    }
  }
  for (const auto& c : claims_without_cases)
    std::fprintf(so, "warning: no manifest case exercises the claimed kernel %s\n", c.c_str());
  // failures: always, with reproduction lines
  bool any_failure_printed = false;
  for (const auto& o : outcomes) {
    if (!is_failure(o.r.status)) continue;
    if (!any_failure_printed) std::fprintf(so, "\nfailures:\n");
    any_failure_printed = true;
    std::fprintf(so, "  %s %s: %s\n    %s\n", status_name(o.r.status), o.id.c_str(), o.r.reason.c_str(), o.repro.c_str());
  }
  std::fprintf(so, "\ntests: %zu passed: %zu failed: %zu not_supported: %zu mistrusted: %zu\n", results, passed, failed,
               counts[Status::NotSupported], counts[Status::Mistrusted]);
  if (failed)
    std::fprintf(so, "  (failed = %zu FAIL + %zu UNIMPLEMENTED + %zu HARNESS_ERROR + %zu CRASH + %zu TIMEOUT)\n",
                 counts[Status::Fail], counts[Status::Unimplemented], counts[Status::HarnessError], counts[Status::Crash],
                 counts[Status::Timeout]);
  if (opt.isolate)
    std::fprintf(so, "time: %.2f s (isolated: %zu %sworker process%s, per-case timeout %g s)\n", total_seconds,
                 workers, exec_workers ? "exec'd " : "", workers == 1 ? "" : "es", opt.timeout_s);
  else
    std::fprintf(so, "time: %.2f s (not isolated)\n", total_seconds);
  if (!relaxed_items.empty()) {
    std::fprintf(so, "\nRELAXED (%zu cases held to a relaxation instead of the published table):\n", relaxed_items.size());
    for (const Relaxation* r : relaxations_used)
      std::fprintf(so, "  relaxation %s (%zu cases): %s\n", relaxation_title(*r).c_str(),
                   relaxed_case_count[relaxation_source(*r)], r->reason);
    for (const auto& item : relaxed_items) std::fprintf(so, "  RELAXED %s\n", item.c_str());
  }
  if (self_check) std::fprintf(so, "note: the reference was compared with itself; this certifies nothing about its results\n");
  if (certified) std::fprintf(so, "verdict: %s (profile: %s)\n", verdict_word.c_str(), profile);
  else if (cases.empty()) std::fprintf(so, "verdict: NOT CERTIFIED (0 failures; no cases ran: the plugin claims nothing the suite covers)\n");
  else std::fprintf(so, "verdict: NOT CERTIFIED (%zu failures)\n", failed);

  // ---- reports ----
  const std::string so_sha = plugin.info.path ? sha256_file(plugin.info.path).value_or("") : "";
  std::error_code ec;
  fs::create_directories(opt.out_dir, ec);
  {
    JsonWriter w;
    w.begin_object();
    w.key("suite").begin_object();
    w.key("name").value("deepx-conformance");
    w.key("version").value(kSuiteVersion);
    w.key("commit").value(DEEPX_CONFORMANCE_COMMIT);
    w.key("manifests").begin_array();
    for (const auto& m : manifest_list) w.value(m);
    w.end_array();
    w.end_object();
    auto plugin_json = [&](const Loaded& l) {
      w.begin_object();
      w.key("name").value(l.info.name ? l.info.name : "");
      w.key("vendor").value(l.info.vendor ? l.info.vendor : "");
      w.key("version").value(l.info.version ? l.info.version : "");
      w.key("build_id").value(l.info.build_id ? l.info.build_id : "");
      w.key("path").value(l.info.path ? l.info.path : "");
      w.key("abi_version").value(static_cast<int64_t>(l.info.abi_version));
      w.key("sha256").value(l.info.path ? sha256_file(l.info.path).value_or("") : "");
      w.end_object();
    };
    w.key("plugin");
    plugin_json(plugin);
    w.key("reference");
    plugin_json(reference);
    w.key("self_check").value(self_check);
    w.key("devices").begin_array();
    for (const auto& d : profile_devices) w.value(d);
    w.end_array();
    w.key("host").value(host_description());
    w.key("date").value(iso_time());
    w.key("seed").value(opt.seed);
    w.key("tolerance_table_sha256").value(tolerance_table_sha256());
    // The published page (docs/tolerances.md) embeds this Markdown; a unit test keeps them equal.
    w.key("tolerance_doc_sha256").value(deepx::util::sha256_hex(tolerance_table_markdown()));
    w.key("relaxed").begin_array();
    for (const auto& item : relaxed_items) w.value(item);
    w.end_array();
    w.key("relaxations_applied").begin_array();  // the relaxations the verdict relied on
    for (const Relaxation* r : relaxations_used) {
      w.begin_object();
      w.key("relaxation").value(relaxation_title(*r));
      w.key("reason").value(r->reason);
      w.key("cases").value(static_cast<uint64_t>(relaxed_case_count[relaxation_source(*r)]));
      w.end_object();
    }
    w.end_array();
    w.key("tolerance_table").raw(tolerance_table_json());
    w.key("profile").begin_array();
    for (const auto& [op, list] : env.plugin_claims)
      for (const auto& c : list) {
        std::string sig;
        for (size_t i = 0; i < c.signature.size(); ++i) sig += (i ? "," : "") + packed_name(c.signature[i]);
        w.value(op + " " + c.device + " (" + sig + ")");
      }
    w.end_array();
    w.key("uncovered_claims").begin_array();
    for (const auto& c : env.uncovered_claims) w.value(c.op + " " + c.device + " " + c.dtype);
    w.end_array();
    w.key("claims_without_cases").begin_array();
    for (const auto& c : claims_without_cases) w.value(c);
    w.end_array();
    w.key("totals").begin_object();
    w.key("cases").value(static_cast<uint64_t>(cases.size()));
    w.key("results").value(static_cast<uint64_t>(results));
    for (Status s : kAllStatuses)
      w.key(status_name(s)).value(static_cast<uint64_t>(counts[s]));
    w.key("time_s").value(total_seconds);
    w.end_object();
    w.key("verdict").value(certified ? verdict_word : "NOT CERTIFIED");
    w.key("profile_summary").value(profile);
    w.key("certificate").begin_object();
    w.key("plugin_sha256").value(so_sha);
    w.key("certified").value(certified);
    w.key("verdict").value(certified ? verdict_word : "NOT CERTIFIED");
    w.key("relaxations").begin_array();  // as in the certificate file's relaxed lines
    for (const Relaxation* r : relaxations_used) {
      if (!certified) break;
      w.value(single_line(relaxation_title(*r) + ": " + r->reason));
    }
    w.end_array();
    w.key("profile").value(profile);
    w.key("kernels").begin_array();  // as in the certificate file's kernel lines; none when not certified
    for (const Claim* c : profile_claims) {
      if (!certified) break;
      std::string sig;
      for (size_t i = 0; i < c->signature.size(); ++i) sig += (i ? "," : "") + std::to_string(c->signature[i]);
      w.value(c->op + " " + std::to_string(c->device_type) + " " + sig);
    }
    w.end_array();
    w.end_object();
    w.key("isolation").begin_object();
    w.key("isolated").value(opt.isolate);
    w.key("case_timeout_s").value(opt.timeout_s);
    w.key("worker_processes").value(static_cast<uint64_t>(workers));
    w.end_object();
    w.key("cases").begin_array();
    for (size_t i = 0; i < outcomes.size(); ++i) write_case_json(w, outcomes[i], static_cast<int64_t>(i));
    w.end_array();
    w.end_object();
    std::ofstream out(fs::path(opt.out_dir) / "report.json", std::ios::binary);
    out << w.str() << "\n";
    if (!out) {
      std::fprintf(stderr, "deepx-certify: cannot write %s/report.json\n", opt.out_dir.c_str());
      return kExitHarness;
    }
  }
  {
    std::map<std::string, std::vector<const Outcome*>> by_op;
    for (const auto& o : outcomes) by_op[o.c.display_op()].push_back(&o);
    std::ostringstream x;
    x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
    // The verdict (CERTIFIED-with-relaxations included) as a comment: JUnit has no place for it.
    x << "<!-- deepx-certify verdict: " << xml_escape(certified ? verdict_word : "NOT CERTIFIED") << " -->\n";
    x << "<testsuites name=\"deepx-certify " << xml_escape(plugin_name) << "\" tests=\"" << results << "\" failures=\""
      << failed << "\" time=\"" << total_seconds << "\">\n";
    for (const auto& [op, list] : by_op) {
      size_t f = 0, skipped = 0;
      double t = 0;
      std::set<std::string> suite_relaxations;  // the relaxations this suite's cases were held to
      for (const auto* o : list) {
        if (is_failure(o->r.status)) ++f;
        if (o->r.status == Status::NotSupported) ++skipped;
        if (o->r.tolerance.relaxed && !is_failure(o->r.status)) suite_relaxations.insert(o->r.tolerance.source);
        t += o->r.seconds;
      }
      x << "  <testsuite name=\"" << xml_escape(op) << "\" tests=\"" << list.size() << "\" failures=\"" << f
        << "\" errors=\"0\" skipped=\"" << skipped << "\" time=\"" << t << "\">\n";
      if (!suite_relaxations.empty()) {
        x << "    <properties>\n";
        for (const auto& source : suite_relaxations)
          x << "      <property name=\"RELAXED\" value=\"" << xml_escape(source) << "\"/>\n";
        x << "    </properties>\n";
      }
      for (const auto* o : list) {
        x << "    <testcase classname=\"" << xml_escape(op + "." + o->c.dtype) << "\" name=\""
          << xml_escape(o->id + " " + o->c.line()) << "\" time=\"" << o->r.seconds << "\"";
        const bool relaxed = o->r.tolerance.relaxed && !is_failure(o->r.status);
        if (is_failure(o->r.status)) {
          x << ">\n      <failure type=\"" << status_name(o->r.status) << "\" message=\"" << xml_escape(o->r.reason)
            << "\">" << xml_escape(o->repro) << "</failure>\n    </testcase>\n";
        } else if (o->r.status == Status::NotSupported) {
          x << ">\n      <skipped message=\"" << xml_escape(o->r.reason) << "\"/>\n    </testcase>\n";
        } else if (o->r.status == Status::Mistrusted) {
          x << ">\n      <system-out>MISTRUSTED: " << xml_escape(o->r.reason)
            << (relaxed ? "\nRELAXED: " + xml_escape(o->r.tolerance.source) : std::string()) << "</system-out>\n    </testcase>\n";
        } else if (relaxed) {
          x << ">\n      <system-out>RELAXED: " << xml_escape(o->r.tolerance.source) << "</system-out>\n    </testcase>\n";
        } else {
          x << "/>\n";
        }
      }
      x << "  </testsuite>\n";
    }
    x << "</testsuites>\n";
    std::ofstream out(fs::path(opt.out_dir) / "junit.xml", std::ios::binary);
    out << x.str();
  }
  // ---- certificate: the verdict bound to the .so's SHA-256 and the certified kernels ----
  const fs::path default_certificate = fs::path(opt.out_dir) / "certificate";
  const fs::path certificate_path = opt.certificate_path.empty() ? default_certificate : fs::path(opt.certificate_path);
  std::string certificate_note;
  bool certificate_written = false;
  if (certified && !self_check && !so_sha.empty() && counts[Status::HarnessError] == 0) {
    std::string text = certificate_text(plugin_name, so_sha, plugin.info.build_id ? plugin.info.build_id : "",
                                        kSuiteVersion, verdict_word, relaxations_used, profile_claims);
    const fs::path tmp = certificate_path.string() + ".tmp";
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << text;
      out.close();
      if (!out) certificate_note = "cannot write " + tmp.string();
    }
    if (certificate_note.empty()) {
      fs::rename(tmp, certificate_path, ec);  // atomic: a reader never sees half a certificate
      if (ec) certificate_note = "cannot write " + certificate_path.string() + ": " + ec.message();
      else certificate_written = true;
    }
    if (!certificate_written) fs::remove(tmp, ec);
  } else {
    // A certificate left by an earlier run must not outlive a failed one.
    fs::remove(default_certificate, ec);
    if (!opt.certificate_path.empty()) fs::remove(certificate_path, ec);
    if (certified && self_check) certificate_note = "no certificate for a self-check of the reference";
    else if (certified) certificate_note = "no certificate: the plugin's library could not be hashed";
  }
  if (certificate_written) {
    std::fprintf(so, "certificate: %s (%zu kernels, sha256 %s)\n", certificate_path.c_str(), profile_claims.size(),
                 so_sha.c_str());
    if (!relaxations_used.empty())
      std::fprintf(so, "certificate verdict: %s (%zu relaxations recorded in it)\n", verdict_word.c_str(),
                   relaxations_used.size());
  }
  else if (!certificate_note.empty())
    std::fprintf(so, "%s\n", certificate_note.c_str());

  // ---- report.html ----
  {
    HtmlReportData h;
    h.plugin_name = plugin_name;
    h.plugin_version = plugin.info.version ? plugin.info.version : "";
    h.plugin_path = plugin.info.path ? plugin.info.path : "";
    h.plugin_sha256 = so_sha;
    h.suite_version = kSuiteVersion;
    h.suite_commit = DEEPX_CONFORMANCE_COMMIT;
    h.verdict = certified ? verdict_word : "NOT CERTIFIED (" + std::to_string(failed) + " failures)";
    h.relaxed = relaxed_items;
    h.profile = profile;
    char totals[200];
    std::snprintf(totals, sizeof totals, "tests: %zu passed: %zu failed: %zu not_supported: %zu mistrusted: %zu", results,
                  passed, failed, counts[Status::NotSupported], counts[Status::Mistrusted]);
    h.totals_line = totals;
    h.date = iso_time();
    h.host = host_description();
    h.seed = std::to_string(opt.seed);
    for (const auto& o : outcomes) {
      HtmlCase hc;
      hc.op = o.c.display_op();
      hc.dtype = o.c.dtype;
      hc.status = status_name(o.r.status);
      hc.id = o.id;
      hc.reason = o.r.reason;
      hc.repro = o.repro;
      hc.failure = is_failure(o.r.status);
      hc.compared_float = o.r.compared && is_float(dtype_from_name(o.r.out_dtype).value_or(DType::I64));
      hc.max_ulp = o.r.comparison.max_ulp;
      h.cases.push_back(std::move(hc));
    }
    for (const auto& c : claims_without_cases) h.warnings.push_back("no manifest case exercises the claimed kernel " + c);
    for (const auto& c : env.uncovered_claims)
      h.warnings.push_back("claimed but not covered by this suite version: " + c.op + " " + c.dtype + " " + c.device);
    std::ofstream out(fs::path(opt.out_dir) / "report.html", std::ios::binary);
    out << render_html_report(h);
  }
  if (!opt.quiet)
    std::fprintf(so, "reports: %s/report.json, %s/junit.xml, %s/report.html\n", opt.out_dir.c_str(),
                 opt.out_dir.c_str(), opt.out_dir.c_str());

  // ---- performance mode ----
  if (opt.perf) {
    std::set<std::string> broken;  // kernels that crashed or hung: not timed
    for (const auto& o : outcomes)
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

  if (counts[Status::HarnessError]) return kExitHarness;
  return certified ? kExitCertified : kExitFailures;
}
