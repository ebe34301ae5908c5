#include "diagnosis.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "dtype.hpp"
#include "isolation.hpp"

namespace deepx::conformance {
namespace {

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

// The runner fills every output with the byte 0xA5 before the call (runner.cpp, run_forward):
// an element that still holds it was never written.
bool is_fill_pattern(const std::string& dtype_name, double value) {
  const std::optional<DType> dtype = dtype_from_name(dtype_name);
  if (!dtype || *dtype == DType::Bool) return false;
  unsigned char bytes[16];
  std::memset(bytes, 0xA5, sizeof bytes);
  return value == load_double(*dtype, bytes);
}

std::string describe_layouts(const Case& c) {
  std::string what;
  auto add = [&](const std::string& layout, const std::string& tensor) {
    std::string words;
    if (layout == "broadcast0" || layout == "broadcastlast") words = "a stride-0 (broadcast) view";
    else if (layout == "offset") words = "a view at an offset from its buffer's start";
    else if (layout == "sliced") words = "a sliced (strided) view";
    else if (layout == "transposed") words = "a transposed view";
    else return;
    what += (what.empty() ? "" : ", ") + tensor + " is " + words + " (" + layout + ")";
  };
  for (size_t i = 0; i < c.layouts.size(); ++i) add(c.layouts[i], "input " + std::to_string(i));
  add(c.out_layout, "the output");
  return what;
}

bool all_compact(const Case& c) {
  for (const auto& l : c.layouts)
    if (l != "contig") return false;
  return c.out_layout == "contig";
}

}  // namespace

const char* defect_name(Defect d) {
  switch (d) {
    case Defect::kNone: return "";
    case Defect::kWrongValue: return "wrong value";
    case Defect::kNeverWritten: return "never written";
    case Defect::kWrittenOutside: return "written outside the output";
    case Defect::kLayoutDependent: return "depends on the input layout";
    case Defect::kNondeterministic: return "nondeterministic";
    case Defect::kCrash: return "crash";
    case Defect::kTimeout: return "timeout";
  }
  return "";
}

Defect classify(const Case& c, const CaseResult& r) {
  (void)c;
  if (r.status == Status::Crash) return Defect::kCrash;
  if (r.status == Status::Timeout) return Defect::kTimeout;
  if (r.status != Status::Fail) return Defect::kNone;
  if (contains(r.reason, "different bits")) return Defect::kNondeterministic;
  if (contains(r.reason, "outside its output view") || contains(r.reason, "modified input")) return Defect::kWrittenOutside;
  if (r.compared && r.comparison.mismatches > 0) {
    if (is_fill_pattern(r.out_dtype, r.comparison.worst_actual)) return Defect::kNeverWritten;
    return Defect::kWrongValue;
  }
  return Defect::kNone;
}

void diagnose(const Environment& env, std::vector<Outcome>& outcomes, size_t max_reruns, double timeout_s) {
  std::vector<size_t> rerun;  // wrong values of non-compact cases
  for (size_t i = 0; i < outcomes.size(); ++i) {
    Outcome& o = outcomes[i];
    const Defect d = classify(o.c, o.r);
    const CaseResult& r = o.r;
    switch (d) {
      case Defect::kNone: break;
      case Defect::kNeverWritten:
        o.diagnosis = std::string(defect_name(d)) + ": output element " + std::to_string(r.comparison.worst_index) +
                      " (and maybe others) still holds the fill pattern (bytes 0xA5) the runner wrote before the "
                      "call: the kernel did not write it";
        break;
      case Defect::kWrongValue:
        o.diagnosis = std::string(defect_name(d)) + ": " + std::to_string(r.comparison.mismatches) + " of " +
                      std::to_string(r.comparison.elements) + " output elements outside the tolerance";
        if (!all_compact(o.c) && rerun.size() < max_reruns) rerun.push_back(i);
        break;
      case Defect::kWrittenOutside:
        o.diagnosis = std::string(defect_name(d)) + ": the kernel wrote memory it must not (see the reason above)";
        break;
      case Defect::kNondeterministic:
        o.diagnosis = std::string(defect_name(d)) + ": identical runs on identical inputs gave different bits";
        break;
      case Defect::kCrash:
        o.diagnosis = std::string(defect_name(d)) + ": the process running the case died";
        break;
      case Defect::kTimeout:
        o.diagnosis = std::string(defect_name(d)) + ": the case ran longer than the per-case limit";
        break;
      default: break;
    }
  }
  if (rerun.empty()) return;
  // One forked worker reruns every candidate with compact tensors and writes one byte per case
  // ('1': passed compact) to a memory file the parent reads afterwards.
  const int fd = ::memfd_create("deepx-certify-diagnosis", MFD_CLOEXEC);
  if (fd < 0) return;
  run_in_child(
      [&] {
        for (size_t i : rerun) {
          Case compact = outcomes[i].c;
          compact.layouts.assign(compact.layouts.size(), "contig");
          compact.out_layout = "contig";
          const Status s = execute_case(env, compact).status;
          const char mark = (s == Status::Pass || s == Status::Mistrusted) ? '1' : '0';
          if (::write(fd, &mark, 1) != 1) return;
        }
      },
      timeout_s);
  std::vector<char> marks(rerun.size(), '0');
  const ssize_t got = ::pread(fd, marks.data(), marks.size(), 0);
  ::close(fd);
  for (size_t k = 0; k < rerun.size() && static_cast<ssize_t>(k) < got; ++k) {
    if (marks[k] != '1') continue;
    Outcome& o = outcomes[rerun[k]];
    o.diagnosis = std::string(defect_name(Defect::kLayoutDependent)) + ": wrong with this layout (" +
                  describe_layouts(o.c) + "), right when every tensor is compact: the kernel mishandles " +
                  "strides, broadcast (stride-0) dimensions or the byte offset";
  }
}

}  // namespace deepx::conformance
