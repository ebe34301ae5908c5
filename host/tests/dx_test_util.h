// Test helpers for the client API's error objects (deepx/host.h: every fallible call returns a
// dx_error_t* the caller owns, null on success).
//
//   EXPECT_EQ(Code(dx_tensor_read(t, buf, size)), DX_OK) << LastError();
//
// Code() takes the error, remembers its message for LastError() (per thread), destroys it and
// returns its code (DX_OK for null). A success leaves the remembered message as it was, so
// LastError() is the message of the last failed call on this thread ("" before the first).
#ifndef DEEPX_HOST_TESTS_DX_TEST_UTIL_H_
#define DEEPX_HOST_TESTS_DX_TEST_UTIL_H_

#include <cstddef>
#include <string>

#include "deepx/host.h"

namespace deepx_test {

inline std::string& LastErrorSlot() {
  thread_local std::string message;
  return message;
}

/// Takes ownership of `error`: records its message, destroys it, returns its code.
inline dx_status_t Code(dx_error_t* error) {
  if (error == nullptr) return DX_OK;
  const dx_status_t code = dx_error_code(error);
  size_t length = 0;
  const char* message = dx_error_message(error, &length);
  try {
    LastErrorSlot().assign(message, length);
  } catch (...) {
    // Keep the previous message; the code still says what happened.
  }
  dx_error_destroy(error);
  return code;
}

/// The message of the last error Code() took on this thread, or "" when there was none.
inline std::string LastError() { return LastErrorSlot(); }

/// Takes ownership of `error`: destroys it and returns its code (DX_OK for null); its message
/// goes to `*message` when `message` is not null. Nothing is remembered per thread.
inline dx_status_t TakeStatus(dx_error_t* error, std::string* message = nullptr) {
  if (error == nullptr) return DX_OK;
  const dx_status_t code = dx_error_code(error);
  if (message != nullptr) {
    size_t length = 0;
    const char* text = dx_error_message(error, &length);
    try {
      message->assign(text, length);
    } catch (...) {
      dx_error_destroy(error);
      throw;
    }
  }
  dx_error_destroy(error);
  return code;
}

}  // namespace deepx_test

#endif  // DEEPX_HOST_TESTS_DX_TEST_UTIL_H_
