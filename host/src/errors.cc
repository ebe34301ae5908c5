// Errors: the error objects both sides of the ABI exchange (created by the host for its own
// failures and, through the services table, by plugins), the message an entry point parks while
// it fails (Fail/Guard, internal.h), status names, and the exported error accessors.
#include <cstdio>

#include "internal.h"

namespace deepx::host {
namespace {

// The message of the failure the current entry point is returning; see Guard() in internal.h.
thread_local std::string t_pending_message;

// Returned when even an error cannot be allocated; destroying it is a no-op.
dx_error g_out_of_memory_error{DX_OUT_OF_MEMORY, "out of memory (while creating an error)"};

}  // namespace

dx_error_t* MakeError(dx_status_t code, std::string message) {
  try {
    return new dx_error{code, std::move(message)};
  } catch (...) {
    return &g_out_of_memory_error;
  }
}

dx_error_t* ErrorCreate(dx_status_t code, const char* message) {
  try {
    return new dx_error{code, message ? message : ""};
  } catch (...) {
    return &g_out_of_memory_error;
  }
}

void DestroyError(dx_error_t* error) {
  if (error != nullptr && error != &g_out_of_memory_error) delete error;
}

dx_status_t ErrorCode(const dx_error_t* error) { return error ? error->code : DX_OK; }

const char* ErrorMessage(const dx_error_t* error) { return error ? error->message.c_str() : ""; }

const std::string& PendingMessage() { return t_pending_message; }

void ClearPendingMessage() { t_pending_message.clear(); }

dx_status_t Fail(dx_status_t code, std::string message) {
  try {
    t_pending_message = std::move(message);
  } catch (...) {
    // Keep whatever was there: the code still says what happened.
  }
  return code;
}

dx_status_t Failf(dx_status_t code, const char* fmt, ...) {
  char buffer[2048];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(buffer, sizeof buffer, fmt, args);
  va_end(args);
  return Fail(code, buffer);
}

dx_error_t* TakeError(dx_status_t code) noexcept {
  if (code == DX_OK) {
    t_pending_message.clear();
    return nullptr;
  }
  dx_error_t* e;
  if (t_pending_message.empty()) {
    e = MakeError(code, std::string(dx_status_string(code)));
  } else {
    e = MakeError(code, std::move(t_pending_message));
  }
  t_pending_message.clear();
  return e;
}

dx_status_t FailHandle(HandleProblem problem, const char* where, const char* param,
                       const char* kind) {
  return Failf(problem == HandleProblem::kNull ? DX_INVALID_ARGUMENT : DX_FAILED_PRECONDITION,
               "%s: %s is %s (expected a live %s handle)", where, param,
               HandleProblemText(problem), kind);
}

dx_status_t FailFromError(dx_error_t* error, std::string_view prefix) {
  dx_status_t code = error ? error->code : DX_INTERNAL;
  if (code == DX_OK || code < 0 || code >= DX_STATUS_COUNT_) code = DX_UNKNOWN;
  std::string message(prefix);
  message += error ? error->message : std::string("(no error object)");
  DestroyError(error);
  return Fail(code, std::move(message));
}

}  // namespace deepx::host

using namespace deepx::host;

extern "C" {

DX_EXPORT const char* dx_status_string(dx_status_t code) {
  switch (code) {
#define DX_STATUS_CASE_(name, value, desc) \
  case value:                              \
    return #name;
    DX_STATUS_TABLE(DX_STATUS_CASE_)
#undef DX_STATUS_CASE_
    default:
      return "UNKNOWN";
  }
}

DX_EXPORT dx_status_t dx_error_code(const dx_error_t* error) { return ErrorCode(error); }

DX_EXPORT const char* dx_error_message(const dx_error_t* error, size_t* out_length) {
  if (error == nullptr) {
    if (out_length) *out_length = 0;
    return "";
  }
  if (out_length) *out_length = error->message.size();
  return error->message.c_str();
}

DX_EXPORT void dx_error_destroy(dx_error_t* error) { DestroyError(error); }

}  // extern "C"
