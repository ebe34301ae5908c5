// Shared pieces of the host's fuzz targets: a byte reader whose integers reach the awkward
// values (huge, negative, overflowing) in one or two bytes, checks that abort with a message
// (libFuzzer saves the input), the fixture runtime, and a model of what a strided tensor
// touches, against which the host's views, reads, writes and copies are checked.
//
// Input encoding (what the seed generator make_seeds.py writes):
//   U8()   one byte; 0 when the input is exhausted (every reader returns 0 past the end).
//   Int()  an int64 from one tag byte b, then maybe more bytes:
//            0x00..0x7f  b                       (0..127)
//            0x80..0xbf  -(b - 0x7f)             (-1..-64)
//            0xc0..0xcf  a named edge value: kEdges[b - 0xc0] (INT64_MIN, INT64_MAX, 2^62+1, ...)
//            0xd0..0xdf  2^k + d                 (next byte: k % 64, then one signed byte d)
//            0xe0..0xef  -(2^k) + d              (as above)
//            0xf0..0xff  the next 8 bytes, little-endian
#ifndef DEEPX_HOST_FUZZ_FUZZ_COMMON_H_
#define DEEPX_HOST_FUZZ_FUZZ_COMMON_H_

#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "deepx/host.h"
#include "deepx/plugin.h"

namespace deepx_fuzz {

// Stops the run with a message: libFuzzer reports the abort as a crash and saves the input.
[[noreturn]] inline void Fatal(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline void Fatal(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fputs("deepx fuzz check failed: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
  std::fflush(stderr);
  std::abort();
}

#define FUZZ_CHECK(cond, ...)                                         \
  do {                                                                \
    if (!(cond))                                                      \
      ::deepx_fuzz::Fatal("%s:%d: %s: %s", __FILE__, __LINE__, #cond, \
                          ::deepx_fuzz::Format(__VA_ARGS__).c_str()); \
  } while (0)

inline std::string Format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline std::string Format(const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  return buf;
}

// ---- input ------------------------------------------------------------------------------------

constexpr int64_t kEdges[16] = {
    std::numeric_limits<int64_t>::min(),          // 0xc0
    std::numeric_limits<int64_t>::max(),          // 0xc1
    (int64_t{1} << 62) + 1,                       // 0xc2
    std::numeric_limits<int64_t>::min() + 1,      // 0xc3
    int64_t{1} << 32,                             // 0xc4
    (int64_t{1} << 31) - 1,                       // 0xc5
    int64_t{0xffffffff},                          // 0xc6
    -(int64_t{1} << 31),                          // 0xc7
    int64_t{1} << 61,                             // 0xc8
    (int64_t{1} << 61) + 1,                       // 0xc9
    int64_t{1} << 40,                             // 0xca
    -4,                                           // 0xcb (as uint64: 2^64 - 4)
    std::numeric_limits<int64_t>::max() / 2,      // 0xcc
    std::numeric_limits<int64_t>::max() / 4 + 1,  // 0xcd
    1000000,                                      // 0xce
    -(int64_t{1} << 60),                          // 0xcf
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  bool empty() const { return p_ >= end_; }
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  uint8_t U8() { return p_ < end_ ? *p_++ : 0; }
  uint64_t Raw64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(U8()) << (8 * i);
    return v;
  }
  int64_t Int() {
    const uint8_t b = U8();
    if (b < 0x80) return b;
    if (b < 0xc0) return -static_cast<int64_t>(b - 0x7f);
    if (b < 0xd0) return kEdges[b - 0xc0];
    if (b < 0xf0) {
      const uint64_t k = U8() % 64;
      const int64_t d = static_cast<int8_t>(U8());
      uint64_t v = (uint64_t{1} << k) + static_cast<uint64_t>(d);
      if (b >= 0xe0) v = (uint64_t{0} - (uint64_t{1} << k)) + static_cast<uint64_t>(d);
      return static_cast<int64_t>(v);
    }
    return static_cast<int64_t>(Raw64());
  }
  // `n` bytes (fewer when the input ends).
  std::string Bytes(size_t n) {
    n = std::min(n, left());
    std::string s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// ---- errors -----------------------------------------------------------------------------------

// DEEPX_FUZZ_VERBOSE=1 in the environment prints every error the host returns (to see what
// an input does: `DEEPX_FUZZ_VERBOSE=1 fuzz_<target> <file>`).
inline bool Verbose() {
  static const bool verbose = [] {
    const char* v = std::getenv("DEEPX_FUZZ_VERBOSE");
    return v != nullptr && *v != '\0' && *v != '0';
  }();
  return verbose;
}

// Reads and frees an error; checks that its message is what dx_error_message promises.
inline dx_status_t Take(dx_error_t* e) {
  if (e == nullptr) return DX_OK;
  const dx_status_t code = dx_error_code(e);
  size_t length = 12345;
  const char* message = dx_error_message(e, &length);
  FUZZ_CHECK(code != DX_OK, "an error object with code DX_OK");
  FUZZ_CHECK(message != nullptr && std::strlen(message) == length,
             "error message length %zu does not match the string", length);
  if (Verbose()) std::fprintf(stderr, "deepx: %s: %s\n", dx_status_string(code), message);
  dx_error_destroy(e);
  return code;
}

// As Take, but keeps the message for a diagnostic.
inline dx_status_t TakeWithMessage(dx_error_t* e, std::string* message) {
  if (e == nullptr) {
    message->clear();
    return DX_OK;
  }
  *message = dx_error_message(e, nullptr);
  return Take(e);
}

// Fails the run unless `e` is success.
#define FUZZ_OK(call)                                                                       \
  do {                                                                                      \
    std::string fuzz_ok_message_;                                                           \
    dx_status_t fuzz_ok_status_ = ::deepx_fuzz::TakeWithMessage((call), &fuzz_ok_message_); \
    FUZZ_CHECK(fuzz_ok_status_ == DX_OK, "%s returned %s: %s", #call,                       \
               dx_status_string(fuzz_ok_status_), fuzz_ok_message_.c_str());                \
  } while (0)

// ---- runtime ----------------------------------------------------------------------------------

// A runtime with one plugin loaded; aborts with the reason when the plugin does not load.
inline dx_runtime_t* MakeRuntime(const char* plugin_path) {
  dx_runtime_options_t options;
  std::memset(&options, 0, sizeof options);
  options.struct_size = DX_RUNTIME_OPTIONS_SIZE_1_0;
  options.flags = DX_RUNTIME_FLAG_IGNORE_ENV;
  dx_runtime_t* rt = nullptr;
  FUZZ_OK(dx_runtime_create(&options, &rt));
  FUZZ_OK(dx_runtime_load_plugin(rt, plugin_path, nullptr));
  return rt;
}

inline int32_t FindDevice(dx_runtime_t* rt, const char* name) {
  int32_t index = -1;
  FUZZ_OK(dx_runtime_find_device(rt, name, &index));
  return index;
}

// Live allocations of every memory space of the runtime (the fixture plugin counts them).
inline uint64_t LiveAllocations(dx_runtime_t* rt) {
  int32_t count = 0;
  FUZZ_OK(dx_runtime_device_count(rt, &count));
  uint64_t live = 0;
  for (int32_t i = 0; i < count; ++i) {
    dx_memory_stats_t stats;
    std::memset(&stats, 0, sizeof stats);
    stats.struct_size = DX_MEMORY_STATS_SIZE_1_0;
    if (Take(dx_runtime_device_stats(rt, i, &stats)) == DX_OK) live += stats.live_allocations;
  }
  return live;
}

// ---- dtypes -----------------------------------------------------------------------------------

constexpr dx_dtype_t kDtypes[10] = {DX_DTYPE_F64, DX_DTYPE_F32, DX_DTYPE_F16, DX_DTYPE_BF16,
                                    DX_DTYPE_I64, DX_DTYPE_I32, DX_DTYPE_I16, DX_DTYPE_I8,
                                    DX_DTYPE_U8,  DX_DTYPE_BOOL};

// A DLDevice's device type read as the int32 it is: a producer may hand over a type past the
// enumerators of the DLPack 0.6 header (DLPack 1.x added more), which C++ cannot load through
// the enum without undefined behaviour.
inline int32_t DeviceType(const DLDevice& d) {
  int32_t v;
  static_assert(sizeof d.device_type == sizeof v, "DLDeviceType is 32-bit");
  std::memcpy(&v, &d.device_type, sizeof v);
  return v;
}

inline uint64_t ElemBytes(DLDataType t) { return (uint64_t{t.bits} + 7) / 8 * t.lanes; }

// ---- the model of a strided tensor --------------------------------------------------------------

using i128 = __int128;

// Products and sums of the model saturate at +-2^100: far above anything an int64 holds, far
// below what overflows an i128, so a layout the host should never accept still computes.
constexpr i128 kCap = i128{1} << 100;
inline i128 SatMul(i128 a, i128 b) {
  if (a == 0 || b == 0) return 0;
  const i128 ua = a < 0 ? -a : a, ub = b < 0 ? -b : b;
  const bool negative = (a < 0) != (b < 0);
  if (ua > kCap / ub) return negative ? -kCap : kCap;
  const i128 p = ua * ub;
  return negative ? -p : p;
}
inline i128 SatAdd(i128 a, i128 b) {
  const i128 s = a + b;  // |a|, |b| <= 2^100: no overflow
  return s > kCap ? kCap : (s < -kCap ? -kCap : s);
}

// The byte offsets, from `t.data`, of the first element and one past the last byte its strides
// reach, computed exactly (no overflow). `numel` is the exact element count. Assumes ndim in
// 0..32 and non-negative shape entries (what the host promises for every tensor it made).
struct Extent {
  i128 numel = 1;
  i128 first = 0;  // t.byte_offset
  i128 end = 0;    // first + (max offset + 1) * elem, or first when empty
};

inline Extent ExtentOf(const DLTensor& t) {
  Extent e;
  const i128 elem = static_cast<i128>(ElemBytes(t.dtype));
  e.first = static_cast<i128>(t.byte_offset);
  bool empty = false;
  for (int32_t d = 0; d < t.ndim; ++d) empty = empty || t.shape[d] == 0;
  i128 max_offset = 0, compact = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    const i128 n = t.shape[d];
    const i128 s = t.strides ? static_cast<i128>(t.strides[d]) : compact;
    if (!empty) e.numel = SatMul(e.numel, n);
    if (n > 1) max_offset = SatAdd(max_offset, SatMul(s, n - 1));
    compact = SatMul(compact, n);
  }
  if (empty) e.numel = 0;
  e.end = e.numel == 0 ? e.first : e.first + (max_offset + 1) * elem;
  return e;
}

// Calls fn(byte offset from t.data) for each element in row-major order (numel must be small).
template <class Fn>
void ForEachElement(const DLTensor& t, Fn&& fn) {
  const int64_t elem = static_cast<int64_t>(ElemBytes(t.dtype));
  int64_t numel = 1;
  for (int32_t d = 0; d < t.ndim; ++d) numel *= t.shape[d];
  if (numel == 0) return;
  int64_t strides[64], index[64] = {0};
  int64_t s = 1;
  for (int32_t d = t.ndim - 1; d >= 0; --d) {
    strides[d] = t.strides ? t.strides[d] : s;
    s *= t.shape[d];
  }
  for (int64_t i = 0; i < numel; ++i) {
    int64_t off = 0;
    for (int32_t d = 0; d < t.ndim; ++d) off += index[d] * strides[d];
    fn(static_cast<int64_t>(t.byte_offset) + off * elem);
    for (int32_t d = t.ndim - 1; d >= 0; --d) {
      if (++index[d] < t.shape[d]) break;
      index[d] = 0;
    }
  }
}

// The memory of one allocation as it must be: updated with each write the host is asked to do,
// compared with the real bytes after every operation.
struct Shadow {
  const uint8_t* base = nullptr;  // the allocation (host-addressable in the fixture plugin)
  std::vector<uint8_t> bytes;     // what it must hold
  bool valid = true;              // false once its bytes are unknown (after an unchecked write)

  void Check(const char* after) const {
    if (!valid || bytes.empty()) return;
    if (std::memcmp(base, bytes.data(), bytes.size()) == 0) return;
    size_t i = 0;
    while (base[i] == bytes[i]) ++i;
    Fatal(
        "after %s: byte %zu of a %zu-byte storage is 0x%02x, expected 0x%02x (a write reached "
        "bytes outside the tensor's elements, or wrote them wrongly)",
        after, i, bytes.size(), base[i], bytes[i]);
  }
};

}  // namespace deepx_fuzz

#endif  // DEEPX_HOST_FUZZ_FUZZ_COMMON_H_
