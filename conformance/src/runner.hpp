// Runs cases through the host API: the reference and the plugin under test get identical
// inputs (same bytes, same layouts) and their outputs are compared with the tolerance table.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "compare.hpp"
#include "deepx/host.h"
#include "manifest.hpp"

namespace deepx::conformance {

// CRASH: the kernel took its process down (a signal, or exit()); TIMEOUT: a case ran past the
// per-case limit. Both come from the isolated worker (isolation.hpp); the run goes on.
enum class Status { Pass, Fail, NotSupported, Unimplemented, Mistrusted, HarnessError, Crash, Timeout };
const char* status_name(Status s);
inline constexpr Status kAllStatuses[] = {Status::Pass,          Status::Fail,         Status::NotSupported,
                                          Status::Unimplemented, Status::Mistrusted,   Status::HarnessError,
                                          Status::Crash,         Status::Timeout};
// FAIL, UNIMPLEMENTED, HARNESS_ERROR, CRASH and TIMEOUT block certification.
inline bool is_failure(Status s) {
  return s == Status::Fail || s == Status::Unimplemented || s == Status::HarnessError || s == Status::Crash ||
         s == Status::Timeout;
}

std::string device_type_name(int32_t device_type);

// Takes the result of a host call (deepx/host.h: an error the caller owns, null on success):
// destroys it and returns its code, DX_OK for null. `message`, when not null, receives the
// error's message (it is left alone on success).
dx_status_t take_status(dx_error_t* error, std::string* message = nullptr);

// One kernel the plugin registered, as the suite sees it.
struct Claim {
  std::string op;
  std::string dtype;   // key dtype: first of the signature
  std::string device;  // device type name
  int32_t device_type = 0;
  uint64_t flags = 0;  // DX_KERNEL_FLAG_* bits
  bool has_supports = false;  // may decline valid calls: DX_UNSUPPORTED is then NOT_SUPPORTED
  bool has_backward = false;
  std::vector<dx_dtype_t> signature;
  std::string sig;  // format_signature() of `signature` (empty when a dtype is unknown)
};

struct Environment {
  dx_runtime_t* runtime = nullptr;
  int32_t plugin_index = -1;
  int32_t reference_index = -1;
  uint64_t seed = 1;
  std::map<std::string, std::vector<Claim>> plugin_claims;     // by op
  std::map<std::string, std::vector<Claim>> reference_claims;  // by op
  std::vector<Claim> uncovered_claims;  // claims of ops the suite has no rule for

  // Fills the claim maps from the runtime's kernel registry. Returns false (with `error`) when
  // the registry cannot be read.
  bool discover(std::string& error);
  const Claim* find_claim(bool reference, const std::string& op, const std::string& sig,
                          const std::string& device) const;
  // The memory space to allocate in for `plugin`'s kernels on `device_type`: the plugin's own,
  // else any of that device type; -1 when none.
  int32_t device_for(int32_t plugin, int32_t device_type) const;
};

struct CaseResult {
  Status status = Status::HarnessError;
  std::string reason;
  bool compared = false;
  Comparison comparison;
  Tolerance tolerance;
  std::string out_dtype;
  Shape out_shape;
  dx_status_t reference_status = DX_OK;
  dx_status_t plugin_status = DX_OK;
  double reference_seconds = 0, plugin_seconds = 0, seconds = 0;
  bool determinism_checked = false;  // the kernel claims DX_KERNEL_FLAG_DETERMINISTIC: run twice
  bool in_place_checked = false;     // the kernel claims DX_KERNEL_FLAG_INPLACE: run aliased too
};

// Runs one case start to finish: claim check, input generation, both invocations, comparison.
// Self-contained (takes the environment and the case, returns a value) so that it runs in the
// isolated worker process (isolation.hpp). Never throws.
CaseResult execute_case(const Environment& env, const Case& c);

// The data key of a case: the run's seed and the canonical line without its device, so a case
// sees the same inputs on every device.
uint64_t case_data_key(uint64_t seed, const Case& c);

// Storage plan of one tensor in a layout (exposed for tests).
struct LayoutPlan {
  Shape base_shape;      // compact tensor that is allocated
  Shape view_strides;    // in elements; empty for the base itself
  int64_t elem_offset = 0;
  bool is_view = false;
};
LayoutPlan plan_layout(const Shape& logical, const std::string& layout);

}  // namespace deepx::conformance
