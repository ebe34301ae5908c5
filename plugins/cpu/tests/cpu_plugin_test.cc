// Unit tests of libdeepx-plugin-cpu.so, driven only through the C ABI: the test dlopens the
// built plugin, initialises it with the shared test host (deepx::testing::TestHost, which
// records its kernels and memory space) and calls the registered kernels on hand-built DLTensors.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "deepx/ops.h"
#include "deepx/plugin.h"
#include "deepx/testing/test_host.h"

namespace {

// ---- the test host ------------------------------------------------------------------------------

using deepx::testing::RegisteredKernel;
using deepx::testing::TestHost;

// What the plugin registered, through the shared test host (testing/).
TestHost g_host;

bool same(DLDataType a, DLDataType b) { return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes; }

/// Loads the plugin once per process and initialises it with the test host; the plugin is shut
/// down at exit (before g_host goes, which was constructed first), so LeakSanitizer sees its state
/// freed.
struct LoadedPlugin {
  void* library = nullptr;
  const dx_plugin_t* plugin = nullptr;  // set when the entry returned a descriptor
  std::string init_error;               // why the load or init failed, or ""

  static LoadedPlugin& get() {
    static LoadedPlugin instance;
    return instance;
  }

 private:
  LoadedPlugin() : load_(std::make_unique<deepx::testing::PluginLoad>(DEEPX_CPU_PLUGIN_PATH, g_host)) {
    library = load_->library();
    plugin = load_->plugin();
    init_error = load_->error();
  }
  std::unique_ptr<deepx::testing::PluginLoad> load_;
};

// ---- dtypes and test tensors --------------------------------------------------------------------

constexpr DLDataType kF64{kDLFloat, 64, 1}, kF32{kDLFloat, 32, 1}, kF16{kDLFloat, 16, 1},
    kBF16{kDLBfloat, 16, 1}, kI64{kDLInt, 64, 1}, kI32{kDLInt, 32, 1}, kI16{kDLInt, 16, 1},
    kI8{kDLInt, 8, 1}, kU8{kDLUInt, 8, 1}, kBool{DX_DLPACK_CODE_BOOL, 8, 1};

const std::vector<DLDataType> kFloatTypes = {kF64, kF32, kF16, kBF16};
const std::vector<DLDataType> kIntTypes = {kI64, kI32, kI16, kI8, kU8};

std::string name_of(DLDataType t) {
  if (same(t, kBool)) return "bool";
  const char* prefix = t.code == kDLFloat ? "f" : t.code == kDLBfloat ? "bf" : t.code == kDLInt ? "i" : "u";
  return prefix + std::to_string(t.bits);
}

bool is_float(DLDataType t) { return t.code == kDLFloat || t.code == kDLBfloat; }

// Independent reference conversions: GCC's _Float16 for f16, integer rounding for bf16.
uint16_t ref_bf16_from_float(float f) {
  uint32_t b = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((b >> 16) | 0x40);
  const uint32_t lower = b & 0xffff0000u;
  const uint32_t remainder = b & 0xffffu;
  uint32_t result = lower;
  if (remainder > 0x8000u || (remainder == 0x8000u && (lower & 0x10000u))) result += 0x10000u;
  return static_cast<uint16_t>(result >> 16);
}
float ref_bf16_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }
uint16_t ref_f16_from_double(double d) { return std::bit_cast<uint16_t>(static_cast<_Float16>(d)); }
double ref_f16_to_double(uint16_t h) { return static_cast<double>(std::bit_cast<_Float16>(h)); }

void encode(DLDataType t, double v, void* dst) {
  auto put = [dst](auto x) { std::memcpy(dst, &x, sizeof x); };
  if (same(t, kF64)) put(v);
  else if (same(t, kF32)) put(static_cast<float>(v));
  else if (same(t, kF16)) put(ref_f16_from_double(v));
  else if (same(t, kBF16)) put(ref_bf16_from_float(static_cast<float>(v)));
  else if (same(t, kBool)) put(static_cast<uint8_t>(v != 0));
  else {
    const auto i = static_cast<uint64_t>(static_cast<int64_t>(v));
    if (t.bits == 64) put(i);
    else if (t.bits == 32) put(static_cast<uint32_t>(i));
    else if (t.bits == 16) put(static_cast<uint16_t>(i));
    else put(static_cast<uint8_t>(i));
  }
}

double decode(DLDataType t, const void* src) {
  auto get = [src](auto x) {
    std::memcpy(&x, src, sizeof x);
    return x;
  };
  if (same(t, kF64)) return get(double{});
  if (same(t, kF32)) return get(float{});
  if (same(t, kF16)) return ref_f16_to_double(get(uint16_t{}));
  if (same(t, kBF16)) return ref_bf16_to_float(get(uint16_t{}));
  if (same(t, kBool)) return get(uint8_t{});
  if (t.code == kDLUInt) return get(uint8_t{});
  if (t.bits == 64) return static_cast<double>(get(int64_t{}));
  if (t.bits == 32) return get(int32_t{});
  if (t.bits == 16) return get(int16_t{});
  return get(int8_t{});
}

/// A tensor owning its storage; may be a strided, offset view into a larger buffer.
struct Tensor {
  DLDataType dtype{};
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // empty: compact (DLTensor strides = NULL)
  int64_t offset = 0;            // in elements
  std::vector<uint8_t> storage;
  DLTensor dl{};

  int64_t count() const {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    return n;
  }
  size_t element_size() const { return dtype.bits / 8; }
  std::vector<int64_t> effective_strides() const {
    if (!strides.empty()) return strides;
    std::vector<int64_t> s(shape.size());
    int64_t acc = 1;
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      s[d] = acc;
      acc *= shape[d];
    }
    return s;
  }
  /// Byte position of the element with row-major index `linear`.
  size_t position(int64_t linear) const {
    const auto st = effective_strides();
    int64_t off = offset;
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      off += (linear % shape[d]) * st[d];
      linear /= shape[d];
    }
    return static_cast<size_t>(off) * element_size();
  }
  double at(int64_t i) const { return decode(dtype, storage.data() + position(i)); }
  void set(int64_t i, double v) { encode(dtype, v, storage.data() + position(i)); }
  template <class T>
  T raw(int64_t i) const {
    T x;
    std::memcpy(&x, storage.data() + position(i), sizeof x);
    return x;
  }
  template <class T>
  void set_raw(int64_t i, T x) {
    std::memcpy(storage.data() + position(i), &x, sizeof x);
  }
  std::vector<double> values() const {
    std::vector<double> v(static_cast<size_t>(count()));
    for (int64_t i = 0; i < count(); ++i) v[i] = at(i);
    return v;
  }
  DLTensor* get() {
    dl.data = storage.data();
    dl.device = DLDevice{kDLCPU, 0};
    dl.ndim = static_cast<int32_t>(shape.size());
    dl.dtype = dtype;
    dl.shape = shape.data();
    dl.strides = strides.empty() ? nullptr : strides.data();
    dl.byte_offset = static_cast<uint64_t>(offset) * element_size();
    return &dl;
  }
};

/// A view with the given strides and element offset into a buffer filled with garbage (0xAB).
Tensor make_view(DLDataType t, std::vector<int64_t> shape, std::vector<int64_t> strides,
                 int64_t offset, const std::vector<double>& values = {}) {
  Tensor x;
  x.dtype = t;
  x.shape = std::move(shape);
  x.strides = std::move(strides);
  x.offset = offset;
  int64_t max_off = offset;
  const auto st = x.effective_strides();
  bool empty = false;
  for (size_t d = 0; d < x.shape.size(); ++d) {
    if (x.shape[d] == 0) empty = true;
    else max_off += (x.shape[d] - 1) * st[d];
  }
  x.storage.assign(static_cast<size_t>((empty ? offset : max_off) + 1) * x.element_size(), 0xAB);
  for (size_t i = 0; i < values.size(); ++i) x.set(static_cast<int64_t>(i), values[i]);
  return x;
}

Tensor make(DLDataType t, std::vector<int64_t> shape, const std::vector<double>& values = {}) {
  return make_view(t, std::move(shape), {}, 0, values);
}

std::vector<double> iota(int64_t n, double start = 0, double step = 1) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = start + step * static_cast<double>(i);
  return v;
}

// ---- calling kernels ----------------------------------------------------------------------------

struct Outcome {
  dx_status_t code = DX_OK;
  std::string message;
  bool ok() const { return code == DX_OK; }
};

const RegisteredKernel* find_kernel(const std::string& op, const std::vector<DLDataType>& sig) {
  return g_host.find(op, sig, kDLCPU);
}

struct Attr {
  static dx_attr_t none(const char* name) { return dx_attr_t{name, DX_ATTR_NONE, 0, 0, {}}; }
  static dx_attr_t i64(const char* name, int64_t v) {
    dx_attr_t a{name, DX_ATTR_I64, 0, 1, {}};
    a.value.i64 = v;
    return a;
  }
  static dx_attr_t boolean(const char* name, bool v) {
    dx_attr_t a{name, DX_ATTR_BOOL, 0, 1, {}};
    a.value.i64 = v;
    return a;
  }
  static dx_attr_t f64(const char* name, double v) {
    dx_attr_t a{name, DX_ATTR_F64, 0, 1, {}};
    a.value.f64 = v;
    return a;
  }
  static dx_attr_t i64s(const char* name, const std::vector<int64_t>& v) {
    dx_attr_t a{name, DX_ATTR_I64_ARRAY, 0, static_cast<int64_t>(v.size()), {}};
    a.value.i64s = v.data();
    return a;
  }
};

Outcome invoke(const std::string& op, std::vector<Tensor*> inputs, std::vector<Tensor*> outputs,
               std::vector<dx_attr_t> attrs = {}) {
  std::vector<DLDataType> sig;
  std::vector<const DLTensor*> in, out;
  for (Tensor* t : inputs) {
    sig.push_back(t->dtype);
    in.push_back(t->get());
  }
  for (Tensor* t : outputs) {
    sig.push_back(t->dtype);
    out.push_back(t->get());
  }
  const RegisteredKernel* k = find_kernel(op, sig);
  if (k == nullptr) {
    std::string s;
    for (auto t : sig) s += name_of(t) + " ";
    ADD_FAILURE() << "no kernel for " << op << " (" << s << ")";
    return {DX_NOT_FOUND, "no kernel"};
  }
  dx_kernel_call_t call{};
  call.struct_size = DX_KERNEL_CALL_SIZE_1_0;
  call.kernel_data = k->desc.kernel_data;
  call.inputs = in.data();
  call.outputs = out.data();
  call.attrs = attrs.data();
  call.num_inputs = static_cast<int32_t>(in.size());
  call.num_outputs = static_cast<int32_t>(out.size());
  call.num_attrs = static_cast<int32_t>(attrs.size());
  call.host = g_host.host();
  dx_error_t* e = k->desc.forward(&call);
  Outcome r;
  if (e != nullptr) {
    r.code = TestHost::error_code(e);
    r.message = TestHost::error_message(e);
    TestHost::destroy_error(e);
  }
  return r;
}

std::vector<dx_attr_t> reduce_attrs(const std::vector<int64_t>* axes, bool keepdims) {
  return {axes ? Attr::i64s("axes", *axes) : Attr::none("axes"), Attr::boolean("keepdims", keepdims)};
}

class CpuPlugin : public ::testing::Test {
 protected:
  void SetUp() override {
    auto& p = LoadedPlugin::get();
    ASSERT_NE(p.plugin, nullptr) << p.init_error;
    // CTest runs this suite once per instruction-set variant (DEEPX_CPU_ISA); a variant this
    // CPU cannot run is refused at init, and its tests say so instead of passing.
    if (p.init_error.find("does not support") != std::string::npos) {
      GTEST_SKIP() << "skipped: " << p.init_error;
    }
    ASSERT_TRUE(p.init_error.empty()) << p.init_error;
  }
};

// Tolerance in units of the dtype's precision (f16/bf16: one rounding).
double tolerance(DLDataType t, double magnitude) {
  double eps = same(t, kF64) ? 0x1p-52 : same(t, kF32) ? 0x1p-23 : same(t, kF16) ? 0x1p-10 : 0x1p-7;
  if (!is_float(t)) return 0;
  return 4 * eps * std::max(1.0, std::fabs(magnitude));
}

// ---- registration ------------------------------------------------------------------------------

TEST_F(CpuPlugin, DescriptorAndRegistrations) {
  const dx_plugin_t* p = LoadedPlugin::get().plugin;
  EXPECT_STREQ(p->name, "cpu");
  EXPECT_STREQ(p->vendor, "deepx");
  EXPECT_EQ(p->abi_version, DX_ABI_VERSION);
  EXPECT_EQ(p->capabilities,
            DX_PLUGIN_CAP_KERNELS | DX_PLUGIN_CAP_MEMORY | DX_PLUGIN_CAP_CONCURRENT_KERNELS);
  // The whole op set v1: the same 704 signatures the reference registers
  // (reference-kernels/src/registry.cc), 292 of them with a backward kernel; the conformance
  // runner lists any claim the reference does not cover.
  EXPECT_EQ(g_host.kernels.size(), 704u);
  for (const auto& [key, k] : g_host.kernels) EXPECT_EQ(k.desc.device_type, kDLCPU) << key;

  for (DLDataType t : kIntTypes) {
    EXPECT_NE(find_kernel("dx.sum", {t, kI64}), nullptr) << name_of(t);
    EXPECT_EQ(find_kernel("dx.exp", {t, t}), nullptr) << name_of(t);
  }
  for (DLDataType t : kFloatTypes) {
    EXPECT_NE(find_kernel("dx.softmax", {t, t}), nullptr);
    EXPECT_NE(find_kernel("dx.matmul", {t, t, t}), nullptr);
  }
  EXPECT_NE(find_kernel("dx.matmul", {kI8, kI8, kI32}), nullptr);
  EXPECT_NE(find_kernel("dx.fill", {kBool}), nullptr);
  EXPECT_NE(find_kernel("dx.transpose", {kBool, kBool}), nullptr);
  const auto* add = find_kernel("dx.add", {kF32, kF32, kF32});
  ASSERT_NE(add, nullptr);
  EXPECT_TRUE(add->desc.flags & DX_KERNEL_FLAG_INPLACE);
  EXPECT_TRUE(add->desc.flags & DX_KERNEL_FLAG_DETERMINISTIC);
  EXPECT_TRUE(find_kernel("dx.sum", {kF32, kF32})->desc.flags & DX_KERNEL_FLAG_DETERMINISTIC);

  ASSERT_EQ(g_host.spaces.size(), 1u);
  const auto& s = g_host.spaces[0].desc;
  EXPECT_EQ(g_host.spaces[0].name, "cpu");
  EXPECT_EQ(s.device.device_type, kDLCPU);
  EXPECT_EQ(s.device.device_id, 0);
  EXPECT_EQ(s.kind, DX_MEMORY_HOST);
  EXPECT_EQ(s.alignment, 64u);
  EXPECT_NE(s.alloc, nullptr);
  EXPECT_NE(s.fill, nullptr);
  EXPECT_EQ(s.stream_create, nullptr);
  EXPECT_EQ(s.event_create, nullptr);
  EXPECT_EQ(s.ipc_export, nullptr);
}

TEST_F(CpuPlugin, EntryRefusesOtherMajors) {
  auto entry = reinterpret_cast<dx_plugin_entry_fn>(
      dlsym(LoadedPlugin::get().library, DX_PLUGIN_ENTRY_SYMBOL));
  EXPECT_EQ(entry(DX_MAKE_VERSION(2, 0), DX_MAKE_VERSION(3, 0)), nullptr);
  EXPECT_NE(entry(DX_MAKE_VERSION(0, 1), DX_MAKE_VERSION(1, 7)), nullptr);
  // Only the entry symbol is exported.
  EXPECT_EQ(dlsym(LoadedPlugin::get().library, "_ZN5deepx3cpu9make_viewEPK8DLTensorPKc"), nullptr);
}

// ---- instruction-set variants -------------------------------------------------------------------

#ifndef DEEPX_CPU_TEST_ISA_VARIANTS
#define DEEPX_CPU_TEST_ISA_VARIANTS "baseline"
#endif

/// Restores DEEPX_CPU_ISA when a test that changes it ends.
struct ScopedIsaEnv {
  std::optional<std::string> saved;
  explicit ScopedIsaEnv(const char* value) {
    if (const char* v = std::getenv("DEEPX_CPU_ISA")) saved = v;
    if (value == nullptr) {
      unsetenv("DEEPX_CPU_ISA");
    } else {
      setenv("DEEPX_CPU_ISA", value, 1);
    }
  }
  ~ScopedIsaEnv() {
    if (saved) {
      setenv("DEEPX_CPU_ISA", saved->c_str(), 1);
    } else {
      unsetenv("DEEPX_CPU_ISA");
    }
  }
};

bool cpu_runs(const std::string& isa) {
  if (isa == "x86-64-v4") return __builtin_cpu_supports("x86-64-v4") != 0;
  if (isa == "x86-64-v3") return __builtin_cpu_supports("x86-64-v3") != 0;
  return isa == "baseline";
}

// Initialises `p` with a test host of its own and returns its init error's status and message
// (or DX_OK).
std::pair<dx_status_t, std::string> init_status(const dx_plugin_t* p) {
  void* state = nullptr;
  TestHost host;  // its own: a variant this CPU runs would register its kernels again
  dx_error_t* e = p->init(host.host(), host.context(), &state);
  if (e == nullptr) return {DX_OK, ""};
  std::pair<dx_status_t, std::string> r{TestHost::error_code(e), TestHost::error_message(e)};
  TestHost::destroy_error(e);
  return r;
}

TEST(CpuIsaVariants, EntryPicksTheBestVariantTheCpuRunsOrTheOneAsked) {
  void* library = LoadedPlugin::get().library;
  ASSERT_NE(library, nullptr) << LoadedPlugin::get().init_error;
  auto entry = reinterpret_cast<dx_plugin_entry_fn>(dlsym(library, DX_PLUGIN_ENTRY_SYMBOL));
  ASSERT_NE(entry, nullptr);
  std::vector<std::string> compiled;  // best first, as CMake lists them
  {
    std::string list = DEEPX_CPU_TEST_ISA_VARIANTS;
    for (size_t at = 0; at <= list.size();) {
      size_t comma = std::min(list.find(',', at), list.size());
      compiled.push_back(list.substr(at, comma - at));
      at = comma + 1;
    }
  }
  ASSERT_EQ(compiled.back(), "baseline");
  auto build_variant = [](const dx_plugin_t* p) {
    std::string id = p->build_id;
    return id.substr(id.rfind('+') + 1);
  };
  std::string best;
  for (const auto& isa : compiled) {
    if (cpu_runs(isa)) {
      best = isa;
      break;
    }
  }
  for (const char* automatic : {static_cast<const char*>(nullptr), "", "auto"}) {
    ScopedIsaEnv env(automatic);
    const dx_plugin_t* p = entry(DX_ABI_VERSION, DX_ABI_VERSION);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(build_variant(p), best) << "DEEPX_CPU_ISA=" << (automatic ? automatic : "(unset)");
  }
  for (const auto& isa : compiled) {
    ScopedIsaEnv env(isa.c_str());
    const dx_plugin_t* p = entry(DX_ABI_VERSION, DX_ABI_VERSION);
    ASSERT_NE(p, nullptr) << isa;
    EXPECT_STREQ(p->name, "cpu");
    if (cpu_runs(isa)) {
      EXPECT_EQ(build_variant(p), isa);
    } else {  // refused at init, never run: it would die of an illegal instruction
      auto [code, message] = init_status(p);
      EXPECT_EQ(code, DX_UNSUPPORTED) << isa;
      EXPECT_NE(message.find("does not support"), std::string::npos) << message;
    }
  }
  for (const char* bogus : {"avx9000", "x86-64-v5", "BASELINE", "native"}) {
    ScopedIsaEnv env(bogus);
    const dx_plugin_t* p = entry(DX_ABI_VERSION, DX_ABI_VERSION);
    ASSERT_NE(p, nullptr) << bogus;
    auto [code, message] = init_status(p);
    EXPECT_EQ(code, DX_UNSUPPORTED) << bogus;
    EXPECT_NE(message.find("names no variant of this build"), std::string::npos) << message;
    EXPECT_NE(message.find("baseline"), std::string::npos) << message;  // lists the choices
  }
}

// ---- memory space ------------------------------------------------------------------------------

TEST_F(CpuPlugin, MemorySpace) {
  const auto& s = g_host.spaces.at(0).desc;
  void* p = reinterpret_cast<void*>(1);
  ASSERT_EQ(s.alloc(s.space_data, 0, nullptr, &p), nullptr);
  EXPECT_EQ(p, nullptr);
  ASSERT_EQ(s.alloc(s.space_data, 1000, nullptr, &p), nullptr);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);

  const uint64_t pattern8 = 0x0123456789abcdefull;
  ASSERT_EQ(s.fill(s.space_data, p, 1000, &pattern8, 8, nullptr), nullptr);
  for (int i = 0; i < 125; ++i) EXPECT_EQ(static_cast<uint64_t*>(p)[i], pattern8);
  const uint16_t pattern2 = 0xbeef;
  ASSERT_EQ(s.fill(s.space_data, p, 998, &pattern2, 2, nullptr), nullptr);
  EXPECT_EQ(static_cast<uint16_t*>(p)[498], 0xbeef);
  dx_error_t* e = s.fill(s.space_data, p, 999, &pattern2, 2, nullptr);
  EXPECT_EQ(TestHost::error_code(e), DX_INVALID_ARGUMENT);
  TestHost::destroy_error(e);
  e = s.fill(s.space_data, p, 12, &pattern2, 3, nullptr);
  EXPECT_EQ(TestHost::error_code(e), DX_INVALID_ARGUMENT);
  TestHost::destroy_error(e);

  // Large copy (parallel path) and fill, all directions.
  const uint64_t big = 24u << 20;
  void* a = nullptr;
  void* b = nullptr;
  ASSERT_EQ(s.alloc(s.space_data, big, nullptr, &a), nullptr);
  ASSERT_EQ(s.alloc(s.space_data, big, nullptr, &b), nullptr);
  const uint32_t pattern4 = 0xdeadbeef;
  ASSERT_EQ(s.fill(s.space_data, a, big, &pattern4, 4, nullptr), nullptr);
  for (uint64_t i = 0; i < big / 4; i += 4099) ASSERT_EQ(static_cast<uint32_t*>(a)[i], pattern4);
  static_cast<uint8_t*>(a)[big - 1] = 7;
  for (int32_t dir = 0; dir < 3; ++dir) {
    std::memset(b, 0, big);
    ASSERT_EQ(s.copy(s.space_data, b, a, big, dir, nullptr), nullptr);
    EXPECT_EQ(std::memcmp(a, b, big), 0);
  }
  e = s.copy(s.space_data, b, a, 16, 9, nullptr);
  EXPECT_EQ(TestHost::error_code(e), DX_INVALID_ARGUMENT);
  TestHost::destroy_error(e);
  EXPECT_EQ(s.free(s.space_data, a, nullptr), nullptr);
  EXPECT_EQ(s.free(s.space_data, b, nullptr), nullptr);
  EXPECT_EQ(s.free(s.space_data, p, nullptr), nullptr);
  EXPECT_EQ(s.free(s.space_data, nullptr, nullptr), nullptr);

  e = s.alloc(s.space_data, UINT64_MAX - 8, nullptr, &p);
  EXPECT_EQ(TestHost::error_code(e), DX_OUT_OF_MEMORY);
  TestHost::destroy_error(e);
}

// ---- elementwise ------------------------------------------------------------------------------

TEST_F(CpuPlugin, BinaryOpsEveryDtype) {
  std::vector<DLDataType> all = kFloatTypes;
  all.insert(all.end(), kIntTypes.begin(), kIntTypes.end());
  const std::vector<double> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const std::vector<double> b = {2, 1, 4, 2, 5, 3, 7, 4, 9, 5, 11, 6};
  for (DLDataType t : all) {
    SCOPED_TRACE(name_of(t));
    Tensor x = make(t, {3, 4}, a), y = make(t, {3, 4}, b);
    const std::pair<const char*, std::function<double(double, double)>> ops[] = {
        {"dx.add", [](double p, double q) { return p + q; }},
        {"dx.sub", [](double p, double q) { return p - q; }},
        {"dx.mul", [](double p, double q) { return p * q; }},
        {"dx.div", [](double p, double q) { return p / q; }}};
    for (const auto& [op, f] : ops) {
      SCOPED_TRACE(op);
      Tensor out = make(t, {3, 4});
      ASSERT_TRUE(invoke(op, {&x, &y}, {&out}).ok());
      for (int i = 0; i < 12; ++i) {
        double want = f(a[i], b[i]);
        if (!is_float(t)) want = std::trunc(want);
        if (t.code == kDLUInt && want < 0) want += 256;
        Tensor w = make(t, {1}, {want});  // rounded like the dtype
        EXPECT_EQ(out.at(i), w.at(0)) << i;
      }
    }
    Tensor neg = make(t, {3, 4});
    ASSERT_TRUE(invoke("dx.neg", {&x}, {&neg}).ok());
    if (t.code != kDLUInt) {
      for (int i = 0; i < 12; ++i) EXPECT_EQ(neg.at(i), -a[i]);
    } else {
      for (int i = 0; i < 12; ++i) EXPECT_EQ(neg.at(i), 256 - a[i]);
    }
  }
}

TEST_F(CpuPlugin, IntegerWrapAndDivision) {
  Tensor a = make(kI8, {4}, {127, -128, -7, 7}), b = make(kI8, {4}, {1, -1, 2, -2});
  Tensor out = make(kI8, {4});
  ASSERT_TRUE(invoke("dx.add", {&a, &b}, {&out}).ok());
  EXPECT_EQ(out.values(), (std::vector<double>{-128, 127, -5, 5}));
  ASSERT_TRUE(invoke("dx.div", {&a, &b}, {&out}).ok());
  EXPECT_EQ(out.values(), (std::vector<double>{127, -128, -3, -3}));  // trunc; INT8_MIN/-1 wraps
  ASSERT_TRUE(invoke("dx.mul", {&a, &a}, {&out}).ok());
  EXPECT_EQ(out.values(), (std::vector<double>{1, 0, 49, 49}));
  ASSERT_TRUE(invoke("dx.neg", {&a}, {&out}).ok());
  EXPECT_EQ(out.values(), (std::vector<double>{-127, -128, 7, -7}));

  Tensor u = make(kU8, {2}, {0, 200}), v = make(kU8, {2}, {1, 100}), uo = make(kU8, {2});
  ASSERT_TRUE(invoke("dx.sub", {&u, &v}, {&uo}).ok());
  EXPECT_EQ(uo.values(), (std::vector<double>{255, 100}));
  ASSERT_TRUE(invoke("dx.add", {&u, &v}, {&uo}).ok());
  EXPECT_EQ(uo.values(), (std::vector<double>{1, 44}));

  Tensor s = make(kI16, {1}), so = make(kI16, {1});
  s.set_raw<int16_t>(0, -32768);
  ASSERT_TRUE(invoke("dx.mul", {&s, &s}, {&so}).ok());  // 2^30 wraps to 0
  EXPECT_EQ(so.raw<int16_t>(0), 0);
  Tensor big = make(kI64, {2}), m1 = make(kI64, {2}, {-1, 3}), bo = make(kI64, {2});
  big.set_raw<int64_t>(0, INT64_MIN);
  big.set_raw<int64_t>(1, INT64_MAX);
  ASSERT_TRUE(invoke("dx.div", {&big, &m1}, {&bo}).ok());
  EXPECT_EQ(bo.raw<int64_t>(0), INT64_MIN);
  EXPECT_EQ(bo.raw<int64_t>(1), INT64_MAX / 3);
  ASSERT_TRUE(invoke("dx.add", {&big, &big}, {&bo}).ok());
  EXPECT_EQ(bo.raw<int64_t>(0), 0);
  EXPECT_EQ(bo.raw<int64_t>(1), -2);
  Tensor i32 = make(kI32, {1}), i32o = make(kI32, {1});
  i32.set_raw<int32_t>(0, INT32_MIN);
  ASSERT_TRUE(invoke("dx.neg", {&i32}, {&i32o}).ok());
  EXPECT_EQ(i32o.raw<int32_t>(0), INT32_MIN);

  for (DLDataType t : kIntTypes) {
    SCOPED_TRACE(name_of(t));
    Tensor p = make(t, {3}, {1, 2, 3}), q = make(t, {3}, {1, 0, 1}), o = make(t, {3}, {9, 9, 9});
    const Outcome r = invoke("dx.div", {&p, &q}, {&o});
    EXPECT_EQ(r.code, DX_ARITHMETIC_ERROR) << r.message;
    Tensor zero = make(t, {}, {0});  // broadcast scalar zero
    EXPECT_EQ(invoke("dx.div", {&p, &zero}, {&o}).code, DX_ARITHMETIC_ERROR);
  }
  // Float division by zero is IEEE.
  Tensor f = make(kF32, {3}, {1, -1, 0}), z = make(kF32, {3}, {0, 0, 0}), fo = make(kF32, {3});
  ASSERT_TRUE(invoke("dx.div", {&f, &z}, {&fo}).ok());
  EXPECT_EQ(fo.at(0), INFINITY);
  EXPECT_EQ(fo.at(1), -INFINITY);
  EXPECT_TRUE(std::isnan(fo.at(2)));
}

TEST_F(CpuPlugin, Broadcasting) {
  for (DLDataType t : {kF32, kF16, kI32, kF64}) {
    SCOPED_TRACE(name_of(t));
    // [2,3] + [3]
    Tensor a = make(t, {2, 3}, iota(6)), b = make(t, {3}, {10, 20, 30}), out = make(t, {2, 3});
    ASSERT_TRUE(invoke("dx.add", {&a, &b}, {&out}).ok());
    EXPECT_EQ(out.values(), (std::vector<double>{10, 21, 32, 13, 24, 35}));
    // [2,1] * [1,3]
    Tensor c = make(t, {2, 1}, {2, 3}), d = make(t, {1, 3}, {1, 2, 4});
    ASSERT_TRUE(invoke("dx.mul", {&c, &d}, {&out}).ok());
    EXPECT_EQ(out.values(), (std::vector<double>{2, 4, 8, 3, 6, 12}));
    // scalar (rank 0) on either side
    Tensor s = make(t, {}, {100});
    ASSERT_TRUE(invoke("dx.sub", {&s, &a}, {&out}).ok());
    EXPECT_EQ(out.values(), (std::vector<double>{100, 99, 98, 97, 96, 95}));
    ASSERT_TRUE(invoke("dx.sub", {&a, &s}, {&out}).ok());
    EXPECT_EQ(out.values(), (std::vector<double>{-100, -99, -98, -97, -96, -95}));
    // stride-0 view of a single element with a full shape
    Tensor z = make_view(t, {2, 3}, {0, 0}, 2, {});
    z.storage.assign(z.storage.size(), 0);
    z.set(0, 5);
    ASSERT_TRUE(invoke("dx.add", {&a, &z}, {&out}).ok());
    EXPECT_EQ(out.values(), (std::vector<double>{5, 6, 7, 8, 9, 10}));
    // rank-0 result
    Tensor s2 = make(t, {}, {7}), so = make(t, {});
    ASSERT_TRUE(invoke("dx.add", {&s, &s2}, {&so}).ok());
    EXPECT_EQ(so.at(0), 107);
    // shape errors
    Tensor bad = make(t, {4});
    EXPECT_EQ(invoke("dx.add", {&a, &bad}, {&out}).code, DX_SHAPE_MISMATCH);
    Tensor wrong_out = make(t, {3, 2});
    EXPECT_EQ(invoke("dx.add", {&a, &b}, {&wrong_out}).code, DX_SHAPE_MISMATCH);
  }
}

TEST_F(CpuPlugin, EmptyTensors) {
  Tensor a = make(kF32, {0, 3}), b = make(kF32, {3}), out = make(kF32, {0, 3});
  EXPECT_TRUE(invoke("dx.add", {&a, &b}, {&out}).ok());
  EXPECT_TRUE(invoke("dx.exp", {&a}, {&out}).ok());
  EXPECT_TRUE(invoke("dx.copy", {&a}, {&out}).ok());
  Tensor ia = make(kI32, {0}), ib = make(kI32, {1}, {0}), io = make(kI32, {0});
  EXPECT_TRUE(invoke("dx.div", {&ia, &ib}, {&io}).ok());  // no element divides by zero
  Tensor s = make(kF32, {});
  const std::vector<int64_t> ax0 = {0};
  EXPECT_TRUE(invoke("dx.sum", {&a}, {&s}, reduce_attrs(nullptr, false)).ok());
  EXPECT_EQ(s.at(0), 0);
  Tensor s3 = make(kF32, {3}, {9, 9, 9});
  EXPECT_TRUE(invoke("dx.sum", {&a}, {&s3}, reduce_attrs(&ax0, false)).ok());
  EXPECT_EQ(s3.values(), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(invoke("dx.max", {&a}, {&s3}, reduce_attrs(&ax0, false)).code, DX_INVALID_ARGUMENT);
  const std::vector<int64_t> ax1 = {1};
  Tensor e0 = make(kF32, {0});
  EXPECT_TRUE(invoke("dx.max", {&a}, {&e0}, reduce_attrs(&ax1, false)).ok());
  Tensor is = make(kI64, {}, {5}), i8e = make(kI8, {0});
  EXPECT_TRUE(invoke("dx.sum", {&i8e}, {&is}, reduce_attrs(nullptr, false)).ok());
  EXPECT_EQ(is.at(0), 0);
  Tensor mm_a = make(kF32, {2, 0}), mm_b = make(kF32, {0, 3}), mm_c = make(kF32, {2, 3});
  ASSERT_TRUE(invoke("dx.matmul", {&mm_a, &mm_b}, {&mm_c}).ok());
  EXPECT_EQ(mm_c.values(), std::vector<double>(6, 0.0));
  Tensor fe = make(kF32, {0, 5});
  EXPECT_TRUE(invoke("dx.fill", {}, {&fe}, {Attr::f64("value", 1)}).ok());
  EXPECT_TRUE(invoke("dx.softmax", {&fe}, {&fe}, {Attr::none("axis")}).ok());
}

TEST_F(CpuPlugin, StridedAndOffsetViewsMatchCompact) {
  for (DLDataType t : {kF32, kF64, kBF16, kI16, kU8}) {
    SCOPED_TRACE(name_of(t));
    const std::vector<double> va = iota(24, 1), vb = iota(24, 3, 2);
    Tensor a = make(t, {2, 3, 4}, va), b = make(t, {2, 3, 4}, vb);
    // Same values, scattered: strides (1, 2*4+1... ) non-contiguous, with offsets.
    Tensor sa = make_view(t, {2, 3, 4}, {40, 12, 3}, 5, va);
    Tensor sb = make_view(t, {2, 3, 4}, {1, 2, 6}, 7, vb);  // column-major-ish
    for (const char* op : {"dx.add", "dx.sub", "dx.mul"}) {
      SCOPED_TRACE(op);
      Tensor want = make(t, {2, 3, 4}), got = make_view(t, {2, 3, 4}, {1, 50, 12}, 3);
      ASSERT_TRUE(invoke(op, {&a, &b}, {&want}).ok());
      ASSERT_TRUE(invoke(op, {&sa, &sb}, {&got}).ok());
      EXPECT_EQ(got.values(), want.values());
    }
    Tensor want = make(t, {2, 3, 4}), got = make_view(t, {2, 3, 4}, {13, 4, 1}, 1);
    ASSERT_TRUE(invoke("dx.neg", {&a}, {&want}).ok());
    ASSERT_TRUE(invoke("dx.neg", {&sa}, {&got}).ok());
    EXPECT_EQ(got.values(), want.values());
    Tensor copied = make(t, {2, 3, 4});
    ASSERT_TRUE(invoke("dx.copy", {&sb}, {&copied}).ok());
    EXPECT_EQ(copied.values(), vb);
    // In place: out aliases input 0 exactly.
    Tensor inplace = make_view(t, {2, 3, 4}, {40, 12, 3}, 5, va);
    ASSERT_TRUE(invoke("dx.add", {&inplace, &b}, {&inplace}).ok());
    Tensor sum = make(t, {2, 3, 4});
    ASSERT_TRUE(invoke("dx.add", {&a, &b}, {&sum}).ok());
    EXPECT_EQ(inplace.values(), sum.values());
  }
}

TEST_F(CpuPlugin, LargeSizesMatchScalarLoop) {
  const int64_t n = (1 << 20) + 37;  // parallel path, ragged tail
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-10.0f, 10.0f);
  Tensor a = make(kF32, {n}), b = make(kF32, {n}), out = make(kF32, {n});
  for (int64_t i = 0; i < n; ++i) {
    a.set_raw<float>(i, dist(rng));
    b.set_raw<float>(i, dist(rng));
  }
  ASSERT_TRUE(invoke("dx.add", {&a, &b}, {&out}).ok());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out.raw<float>(i), a.raw<float>(i) + b.raw<float>(i));
  ASSERT_TRUE(invoke("dx.div", {&a, &b}, {&out}).ok());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out.raw<float>(i), a.raw<float>(i) / b.raw<float>(i));
  ASSERT_TRUE(invoke("dx.relu", {&a}, {&out}).ok());
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out.raw<float>(i), std::max(a.raw<float>(i), 0.0f));
  // Broadcast row over a large matrix, and a transposed (strided) input.
  Tensor m = make(kF32, {1024, 1024}), row = make(kF32, {1024}), mo = make(kF32, {1024, 1024});
  for (int64_t i = 0; i < 1024 * 1024; ++i) m.set_raw<float>(i, static_cast<float>(i % 977));
  for (int64_t i = 0; i < 1024; ++i) row.set_raw<float>(i, static_cast<float>(i));
  ASSERT_TRUE(invoke("dx.mul", {&m, &row}, {&mo}).ok());
  for (int64_t i = 0; i < 1024 * 1024; i += 7) {
    ASSERT_EQ(mo.raw<float>(i), static_cast<float>(i % 977) * static_cast<float>(i % 1024));
  }
  Tensor mt = m;
  mt.strides = {1, 1024};
  ASSERT_TRUE(invoke("dx.sub", {&mt, &m}, {&mo}).ok());
  for (int64_t i = 0; i < 1024; i += 13) {
    for (int64_t j = 0; j < 1024; j += 11) {
      ASSERT_EQ(mo.raw<float>(i * 1024 + j),
                m.raw<float>(j * 1024 + i) - m.raw<float>(i * 1024 + j));
    }
  }
  Tensor ia = make(kI32, {n}), ib = make(kI32, {n}), io = make(kI32, {n});
  for (int64_t i = 0; i < n; ++i) {
    ia.set_raw<int32_t>(i, static_cast<int32_t>(rng()));
    ib.set_raw<int32_t>(i, static_cast<int32_t>(rng() | 1));
  }
  ASSERT_TRUE(invoke("dx.mul", {&ia, &ib}, {&io}).ok());
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(io.raw<int32_t>(i), static_cast<int32_t>(static_cast<uint32_t>(ia.raw<int32_t>(i)) *
                                                       static_cast<uint32_t>(ib.raw<int32_t>(i))));
  }
}

TEST_F(CpuPlugin, ReluAndSpecialValues) {
  for (DLDataType t : kFloatTypes) {
    SCOPED_TRACE(name_of(t));
    Tensor x = make(t, {5}, {-1.5, -0.0, 2.5, NAN, -INFINITY}), y = make(t, {5});
    ASSERT_TRUE(invoke("dx.relu", {&x}, {&y}).ok());
    EXPECT_EQ(y.at(0), 0);
    EXPECT_FALSE(std::signbit(y.at(1)));
    EXPECT_EQ(y.at(2), 2.5);
    EXPECT_TRUE(std::isnan(y.at(3)));
    EXPECT_EQ(y.at(4), 0);
    Tensor e = make(t, {6}, {0, 1, -INFINITY, INFINITY, NAN, 1000}), eo = make(t, {6});
    ASSERT_TRUE(invoke("dx.exp", {&e}, {&eo}).ok());
    EXPECT_EQ(eo.at(0), 1);
    EXPECT_NEAR(eo.at(1), std::exp(1.0), tolerance(t, std::exp(1.0)));
    EXPECT_EQ(eo.at(2), 0);
    EXPECT_EQ(eo.at(3), INFINITY);
    EXPECT_TRUE(std::isnan(eo.at(4)));
    EXPECT_EQ(eo.at(5), INFINITY);
  }
}

double ulp_distance_f32(float got, double exact) {
  const float want = static_cast<float>(exact);
  if (std::isnan(want)) return std::isnan(got) ? 0 : 1e9;
  if (std::isinf(want) || std::isinf(got)) return got == want ? 0 : 1e9;
  auto ordered = [](float f) {
    const int32_t i = std::bit_cast<int32_t>(f);
    return i < 0 ? static_cast<int64_t>(INT32_MIN) - i : static_cast<int64_t>(i);
  };
  return static_cast<double>(std::llabs(ordered(got) - ordered(want)));
}

TEST_F(CpuPlugin, ExpUlpSweepF32) {
  // Every 211th float bit pattern with |x| <= 110 (beyond it the result is 0 or Inf), NaNs,
  // and the edges of overflow and underflow.
  std::vector<float> xs;
  for (uint64_t bits = 0; bits < 0x100000000ull; bits += 211) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (std::isnan(f) || std::fabs(f) <= 110.0f) xs.push_back(f);
  }
  for (float f : {INFINITY, -INFINITY, 88.72283f, 88.72284f, -87.33654f, -103.27893f, -103.97208f, -104.0f, 89.0f}) {
    xs.push_back(f);
    xs.push_back(std::nextafter(f, 0.0f));
  }
  const int64_t n = static_cast<int64_t>(xs.size());
  Tensor x = make(kF32, {n}), y = make(kF32, {n});
  std::memcpy(x.storage.data(), xs.data(), xs.size() * sizeof(float));
  ASSERT_TRUE(invoke("dx.exp", {&x}, {&y}).ok());
  double worst = 0;
  float worst_x = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = ulp_distance_f32(y.raw<float>(i), std::exp(static_cast<double>(xs[i])));
    if (d > worst) {
      worst = d;
      worst_x = xs[i];
    }
  }
  EXPECT_LE(worst, 4.0) << "at x = " << worst_x;
  RecordProperty("exp_f32_max_ulp", std::to_string(worst));

  // f16 / bf16: within 1 ulp over every finite input pattern.
  for (DLDataType t : {kF16, kBF16}) {
    SCOPED_TRACE(name_of(t));
    Tensor h = make(t, {65536}), ho = make(t, {65536});
    for (int i = 0; i < 65536; ++i) h.set_raw<uint16_t>(i, static_cast<uint16_t>(i));
    ASSERT_TRUE(invoke("dx.exp", {&h}, {&ho}).ok());
    for (int i = 0; i < 65536; ++i) {
      const double xi = h.at(i);
      const double exact = std::exp(xi);
      const double got = ho.at(i);
      if (std::isnan(xi)) {
        ASSERT_TRUE(std::isnan(got));
        continue;
      }
      // One ulp of the narrow type around the exact result.
      Tensor r = make(t, {1}, {exact});
      const uint16_t rb = r.raw<uint16_t>(0);
      const uint16_t gb = ho.raw<uint16_t>(i);
      ASSERT_LE(std::abs(static_cast<int>(rb) - static_cast<int>(gb)), 1)
          << "x=" << xi << " got " << got << " want " << exact;
    }
  }
}

TEST_F(CpuPlugin, HalfConversionsRoundToNearestEven) {
  // x + 0 round-trips every pattern (except -0 -> +0 and NaN payloads).
  for (DLDataType t : {kF16, kBF16}) {
    SCOPED_TRACE(name_of(t));
    Tensor h = make(t, {65536}), z = make(t, {}, {0}), ho = make(t, {65536});
    for (int i = 0; i < 65536; ++i) h.set_raw<uint16_t>(i, static_cast<uint16_t>(i));
    ASSERT_TRUE(invoke("dx.add", {&h, &z}, {&ho}).ok());
    for (int i = 0; i < 65536; ++i) {
      const double v = h.at(i);
      if (std::isnan(v)) {
        ASSERT_TRUE(std::isnan(ho.at(i)));
      } else if (v == 0) {
        ASSERT_EQ(ho.at(i), 0);
      } else {
        ASSERT_EQ(ho.raw<uint16_t>(i), static_cast<uint16_t>(i)) << i;
      }
    }
  }
  // Random pairs: a*b and a+b computed once in f32 then rounded must match the independent
  // reference (GCC _Float16 conversions, integer bf16 rounding), including subnormals/overflow.
  std::mt19937 rng(7);
  const int64_t n = 200000;
  for (DLDataType t : {kF16, kBF16}) {
    SCOPED_TRACE(name_of(t));
    Tensor a = make(t, {n}), b = make(t, {n}), o = make(t, {n});
    for (int64_t i = 0; i < n; ++i) {
      a.set_raw<uint16_t>(i, static_cast<uint16_t>(rng()));
      b.set_raw<uint16_t>(i, static_cast<uint16_t>(rng()));
    }
    for (const char* op : {"dx.mul", "dx.add", "dx.div"}) {
      SCOPED_TRACE(op);
      ASSERT_TRUE(invoke(op, {&a, &b}, {&o}).ok());
      for (int64_t i = 0; i < n; ++i) {
        const float x = static_cast<float>(a.at(i)), y = static_cast<float>(b.at(i));
        const float r = op[3] == 'm' ? x * y : op[3] == 'a' ? x + y : x / y;
        if (std::isnan(r)) {
          ASSERT_TRUE(std::isnan(o.at(i)));
          continue;
        }
        const uint16_t want = same(t, kF16) ? ref_f16_from_double(r) : ref_bf16_from_float(r);
        ASSERT_EQ(o.raw<uint16_t>(i), want) << x << " " << y;
      }
    }
  }
}

// ---- reductions ---------------------------------------------------------------------------------

TEST_F(CpuPlugin, SumAndMaxAxes) {
  for (DLDataType t : {kF32, kF64, kF16, kBF16, kI32, kI8, kU8, kI64, kI16}) {
    SCOPED_TRACE(name_of(t));
    const DLDataType sum_t = is_float(t) ? t : kI64;
    Tensor x = make(t, {2, 3, 4}, iota(24));
    const std::vector<int64_t> a1 = {1}, a02 = {0, -1}, none;
    Tensor s1 = make(sum_t, {2, 4});
    ASSERT_TRUE(invoke("dx.sum", {&x}, {&s1}, reduce_attrs(&a1, false)).ok());
    EXPECT_EQ(s1.values(), (std::vector<double>{12, 15, 18, 21, 48, 51, 54, 57}));
    Tensor s1k = make(sum_t, {2, 1, 4});
    ASSERT_TRUE(invoke("dx.sum", {&x}, {&s1k}, reduce_attrs(&a1, true)).ok());
    EXPECT_EQ(s1k.values(), s1.values());
    Tensor s02 = make(sum_t, {3});
    ASSERT_TRUE(invoke("dx.sum", {&x}, {&s02}, reduce_attrs(&a02, false)).ok());
    EXPECT_EQ(s02.values(), (std::vector<double>{60, 92, 124}));
    Tensor all = make(sum_t, {});
    ASSERT_TRUE(invoke("dx.sum", {&x}, {&all}, reduce_attrs(&none, false)).ok());
    EXPECT_EQ(all.at(0), 276);
    Tensor allk = make(sum_t, {1, 1, 1});
    ASSERT_TRUE(invoke("dx.sum", {&x}, {&allk}, reduce_attrs(nullptr, true)).ok());
    EXPECT_EQ(allk.at(0), 276);
    Tensor m1 = make(t, {2, 4});
    ASSERT_TRUE(invoke("dx.max", {&x}, {&m1}, reduce_attrs(&a1, false)).ok());
    EXPECT_EQ(m1.values(), (std::vector<double>{8, 9, 10, 11, 20, 21, 22, 23}));
    // Strided input (transposed view) gives the same sums.
    Tensor xt = make_view(t, {4, 3, 2}, {1, 4, 12}, 0, {});
    xt.storage = x.storage;
    Tensor st = make(sum_t, {4, 2});
    ASSERT_TRUE(invoke("dx.sum", {&xt}, {&st}, reduce_attrs(&a1, false)).ok());
    EXPECT_EQ(st.values(), (std::vector<double>{12, 48, 15, 51, 18, 54, 21, 57}));
    // Errors.
    const std::vector<int64_t> dup = {1, -2}, out_of_range = {3};
    EXPECT_EQ(invoke("dx.sum", {&x}, {&s1}, reduce_attrs(&dup, false)).code, DX_OUT_OF_RANGE);
    EXPECT_EQ(invoke("dx.max", {&x}, {&m1}, reduce_attrs(&out_of_range, false)).code, DX_OUT_OF_RANGE);
    Tensor wrong = make(sum_t, {2, 3});
    EXPECT_EQ(invoke("dx.sum", {&x}, {&wrong}, reduce_attrs(&a1, false)).code, DX_SHAPE_MISMATCH);
    // Rank 0.
    Tensor scalar = make(t, {}, {5}), so = make(sum_t, {});
    ASSERT_TRUE(invoke("dx.sum", {&scalar}, {&so}, reduce_attrs(nullptr, false)).ok());
    EXPECT_EQ(so.at(0), 5);
  }
  // Integer sums accumulate in i64 (wrapping).
  Tensor big = make(kI32, {3}), s = make(kI64, {});
  big.set_raw<int32_t>(0, INT32_MAX);
  big.set_raw<int32_t>(1, INT32_MAX);
  big.set_raw<int32_t>(2, INT32_MIN);
  ASSERT_TRUE(invoke("dx.sum", {&big}, {&s}, reduce_attrs(nullptr, false)).ok());
  EXPECT_EQ(s.raw<int64_t>(0), static_cast<int64_t>(INT32_MAX) - 1);
  Tensor wrap = make(kI64, {2}), ws = make(kI64, {});
  wrap.set_raw<int64_t>(0, INT64_MAX);
  wrap.set_raw<int64_t>(1, 2);
  ASSERT_TRUE(invoke("dx.sum", {&wrap}, {&ws}, reduce_attrs(nullptr, false)).ok());
  EXPECT_EQ(ws.raw<int64_t>(0), INT64_MIN + 1);
  // Max with NaN, -inf, and integers' extremes.
  Tensor f = make(kF32, {2, 3}, {1, NAN, 3, -INFINITY, -INFINITY, -5}), fm = make(kF32, {2});
  const std::vector<int64_t> last = {-1};
  ASSERT_TRUE(invoke("dx.max", {&f}, {&fm}, reduce_attrs(&last, false)).ok());
  EXPECT_TRUE(std::isnan(fm.at(0)));
  EXPECT_EQ(fm.at(1), -5);
  Tensor i8 = make(kI8, {3}, {-128, -128, -127}), i8m = make(kI8, {});
  ASSERT_TRUE(invoke("dx.max", {&i8}, {&i8m}, reduce_attrs(nullptr, false)).ok());
  EXPECT_EQ(i8m.at(0), -127);
}

TEST_F(CpuPlugin, LargeSumAccurateAndDeterministic) {
  const int64_t n = 3'000'001;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensor x = make(kF32, {n});
  double exact = 0, magnitude = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = dist(rng) + 0.25f;
    x.set_raw<float>(i, v);
    exact += v;
    magnitude += std::fabs(v);
  }
  Tensor s = make(kF32, {});
  ASSERT_TRUE(invoke("dx.sum", {&x}, {&s}, reduce_attrs(nullptr, false)).ok());
  EXPECT_NEAR(s.at(0), exact, 8 * 0x1p-24 * std::fabs(exact) + 1e-7 * magnitude / std::sqrt(n));
  // Same result from repeated calls and from a split into 3 rows reduced one by one.
  for (int r = 0; r < 3; ++r) {
    Tensor again = make(kF32, {});
    ASSERT_TRUE(invoke("dx.sum", {&x}, {&again}, reduce_attrs(nullptr, false)).ok());
    EXPECT_EQ(again.raw<float>(0), s.raw<float>(0));
  }
  // Many outputs (parallel over outputs) against a double loop.
  Tensor m = make(kF32, {1000, 3000}), ms = make(kF32, {1000}), mc = make(kF32, {3000});
  for (int64_t i = 0; i < 3'000'000; ++i) m.set_raw<float>(i, x.raw<float>(i));
  const std::vector<int64_t> ax1 = {1}, ax0 = {0};
  ASSERT_TRUE(invoke("dx.sum", {&m}, {&ms}, reduce_attrs(&ax1, false)).ok());
  ASSERT_TRUE(invoke("dx.sum", {&m}, {&mc}, reduce_attrs(&ax0, false)).ok());
  for (int64_t r = 0; r < 1000; r += 37) {
    double want = 0;
    for (int64_t c = 0; c < 3000; ++c) want += m.raw<float>(r * 3000 + c);
    EXPECT_NEAR(ms.at(r), want, 1e-5 * std::max(1.0, std::fabs(want)));
  }
  for (int64_t c = 0; c < 3000; c += 101) {
    double want = 0;
    for (int64_t r = 0; r < 1000; ++r) want += m.raw<float>(r * 3000 + c);
    EXPECT_NEAR(mc.at(c), want, 1e-5 * std::max(1.0, std::fabs(want)));
  }
  Tensor mx = make(kF32, {});
  ASSERT_TRUE(invoke("dx.max", {&x}, {&mx}, reduce_attrs(nullptr, false)).ok());
  float want_max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) want_max = std::max(want_max, x.raw<float>(i));
  EXPECT_EQ(mx.raw<float>(0), want_max);
}

TEST_F(CpuPlugin, ReductionsIgnoreThreadCount) {
#if defined(__SANITIZE_THREAD__)
  // libgomp is not built with ThreadSanitizer, so its barriers are invisible to TSan and every
  // multi-threaded OpenMP region reports false races. The TSan preset runs with one OpenMP
  // thread; this test needs several.
  GTEST_SKIP() << "needs several OpenMP threads, which ThreadSanitizer cannot follow in libgomp";
#endif
  // The plugin shares this process's OpenMP runtime, so omp_set_num_threads steers it.
  const int64_t n = 2'500'003;
  Tensor x = make(kF32, {n}), rows = make(kF32, {5, n / 5});
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-3.0f, 5.0f);
  for (int64_t i = 0; i < n; ++i) x.set_raw<float>(i, dist(rng));
  for (int64_t i = 0; i < rows.count(); ++i) rows.set_raw<float>(i, x.raw<float>(i));
  const std::vector<int64_t> ax1 = {1};
  auto run = [&](int threads) {
    omp_set_num_threads(threads);
    Tensor all = make(kF32, {}), per_row = make(kF32, {5});
    EXPECT_TRUE(invoke("dx.sum", {&x}, {&all}, reduce_attrs(nullptr, false)).ok());
    EXPECT_TRUE(invoke("dx.sum", {&rows}, {&per_row}, reduce_attrs(&ax1, false)).ok());
    std::vector<float> bits = {all.raw<float>(0)};
    for (int r = 0; r < 5; ++r) bits.push_back(per_row.raw<float>(r));
    return bits;
  };
  const int original = omp_get_max_threads();
  const auto one = run(1), two = run(2), three = run(3), seven = run(7);
  omp_set_num_threads(original);
  EXPECT_EQ(one, two);
  EXPECT_EQ(one, three);
  EXPECT_EQ(one, seven);
}

TEST_F(CpuPlugin, Softmax) {
  for (DLDataType t : kFloatTypes) {
    SCOPED_TRACE(name_of(t));
    const std::vector<double> v = {1, 2, 3, 4, 1000, 1000, -1000, 0, -INFINITY, 0, 0.5, -0.5};
    Tensor x = make(t, {3, 4}, v), y = make(t, {3, 4});
    ASSERT_TRUE(invoke("dx.softmax", {&x}, {&y}, {Attr::none("axis")}).ok());
    for (int r = 0; r < 3; ++r) {
      double mx = -INFINITY;
      for (int c = 0; c < 4; ++c) mx = std::max(mx, x.at(r * 4 + c));
      double sum = 0;
      for (int c = 0; c < 4; ++c) sum += std::exp(x.at(r * 4 + c) - mx);
      for (int c = 0; c < 4; ++c) {
        const double want = std::exp(x.at(r * 4 + c) - mx) / sum;
        EXPECT_NEAR(y.at(r * 4 + c), want, tolerance(t, want)) << r << "," << c;
      }
    }
    // axis 0 on a strided output equals the transposed computation.
    Tensor y0 = make_view(t, {3, 4}, {1, 3}, 2);
    ASSERT_TRUE(invoke("dx.softmax", {&x}, {&y0}, {Attr::i64("axis", 0)}).ok());
    for (int c = 0; c < 4; ++c) {
      double mx = -INFINITY;
      for (int r = 0; r < 3; ++r) mx = std::max(mx, x.at(r * 4 + c));
      double sum = 0;
      for (int r = 0; r < 3; ++r) sum += std::exp(x.at(r * 4 + c) - mx);
      for (int r = 0; r < 3; ++r) {
        const double want = std::exp(x.at(r * 4 + c) - mx) / sum;
        EXPECT_NEAR(y0.at(r * 4 + c), want, tolerance(t, want));
      }
    }
    EXPECT_EQ(invoke("dx.softmax", {&x}, {&y}, {Attr::i64("axis", 2)}).code, DX_OUT_OF_RANGE);
    Tensor s = make(t, {}, {3}), so = make(t, {});
    ASSERT_TRUE(invoke("dx.softmax", {&s}, {&so}, {}).ok());
    EXPECT_EQ(so.at(0), 1);
  }
  // A large softmax (parallel rows) sums to one per row.
  Tensor big = make(kF32, {256, 1000}), bo = make(kF32, {256, 1000});
  for (int64_t i = 0; i < 256000; ++i) big.set_raw<float>(i, static_cast<float>((i * 7919) % 200) / 10.0f);
  ASSERT_TRUE(invoke("dx.softmax", {&big}, {&bo}, {Attr::i64("axis", -1)}).ok());
  for (int r = 0; r < 256; r += 17) {
    double sum = 0;
    for (int c = 0; c < 1000; ++c) sum += bo.at(r * 1000 + c);
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

// ---- data movement ------------------------------------------------------------------------------

TEST_F(CpuPlugin, TransposeCopyFill) {
  for (DLDataType t : {kF32, kBool, kI64, kF16, kU8}) {
    SCOPED_TRACE(name_of(t));
    const auto vals = same(t, kBool) ? std::vector<double>{1, 0, 0, 1, 1, 0} : iota(6, 1);
    Tensor x = make(t, {2, 3}, vals);
    Tensor y = make(t, {3, 2});
    ASSERT_TRUE(invoke("dx.transpose", {&x}, {&y}, {Attr::none("perm")}).ok());
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 2; ++j) EXPECT_EQ(y.at(i * 2 + j), vals[j * 3 + i]);
    }
    const std::vector<int64_t> identity = {0, 1}, bad = {0, 0}, short_perm = {1};
    Tensor same_shape = make(t, {2, 3});
    ASSERT_TRUE(invoke("dx.transpose", {&x}, {&same_shape}, {Attr::i64s("perm", identity)}).ok());
    EXPECT_EQ(same_shape.values(), vals);
    EXPECT_EQ(invoke("dx.transpose", {&x}, {&y}, {Attr::i64s("perm", bad)}).code, DX_INVALID_ARGUMENT);
    EXPECT_EQ(invoke("dx.transpose", {&x}, {&y}, {Attr::i64s("perm", short_perm)}).code,
              DX_INVALID_ARGUMENT);
    EXPECT_EQ(invoke("dx.transpose", {&x}, {&same_shape}, {Attr::none("perm")}).code,
              DX_SHAPE_MISMATCH);
    Tensor strided = make_view(t, {3, 2}, {1, 3}, 4);
    ASSERT_TRUE(invoke("dx.copy", {&y}, {&strided}).ok());
    EXPECT_EQ(strided.values(), y.values());
  }
  // 3-d transpose with a permutation.
  Tensor x = make(kI32, {2, 3, 4}, iota(24)), y = make(kI32, {4, 2, 3});
  const std::vector<int64_t> perm = {2, 0, 1};
  ASSERT_TRUE(invoke("dx.transpose", {&x}, {&y}, {Attr::i64s("perm", perm)}).ok());
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 3; ++c) EXPECT_EQ(y.at((a * 2 + b) * 3 + c), (b * 3 + c) * 4 + a);

  // fill conversions.
  struct Case {
    DLDataType t;
    dx_attr_t value;
    double want;
  };
  const Case cases[] = {
      {kI8, Attr::i64("value", 300), 44},            // wraps
      {kI8, Attr::f64("value", 300.7), 127},         // saturates
      {kI8, Attr::f64("value", -300.7), -128},
      {kI32, Attr::f64("value", -2.9), -2},          // truncates toward zero
      {kI32, Attr::f64("value", NAN), 0},
      {kU8, Attr::f64("value", -1.0), 0},
      {kU8, Attr::i64("value", -1), 255},
      {kI64, Attr::f64("value", 1e30), static_cast<double>(INT64_MAX)},
      {kBool, Attr::f64("value", 0.5), 1},
      {kBool, Attr::i64("value", 0), 0},
      {kF32, Attr::f64("value", 0.1), static_cast<double>(0.1f)},
      {kF16, Attr::f64("value", 1e6), INFINITY},
      {kF16, Attr::i64("value", 2049), 2048},        // ties to even
      {kBF16, Attr::f64("value", 1.00390625), 1.0},  // tie -> even
      {kF64, Attr::none("value"), 0},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(name_of(c.t) + " " + std::to_string(c.want));
    Tensor out = make_view(c.t, {2, 2}, {3, 1}, 1);
    ASSERT_TRUE(invoke("dx.fill", {}, {&out}, {c.value}).ok());
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out.at(i), c.want);
  }
  Tensor big = make(kF32, {1 << 20});
  ASSERT_TRUE(invoke("dx.fill", {}, {&big}, {Attr::f64("value", 2.5)}).ok());
  for (int64_t i = 0; i < (1 << 20); i += 4097) ASSERT_EQ(big.raw<float>(i), 2.5f);
  ASSERT_TRUE(invoke("dx.fill", {}, {&big}, {}).ok());  // no attrs at all: 0
  EXPECT_EQ(big.raw<float>(12345), 0.0f);
}

// ---- matmul ------------------------------------------------------------------------------------

/// Naive NumPy matmul on doubles over the tensors' values (after optional transposes).
std::vector<double> naive_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb,
                                 std::vector<int64_t>* out_shape) {
  auto dims = [](const Tensor& t, bool trans) {
    std::vector<int64_t> s = t.shape;
    if (trans && s.size() >= 2) std::swap(s[s.size() - 1], s[s.size() - 2]);
    return s;
  };
  std::vector<int64_t> sa = dims(a, ta), sb = dims(b, tb);
  const bool av = sa.size() == 1, bv = sb.size() == 1;
  if (av) sa.insert(sa.begin(), 1);
  if (bv) sb.push_back(1);
  const int64_t m = sa[sa.size() - 2], k = sa.back(), n = sb.back();
  std::vector<int64_t> ba(sa.begin(), sa.end() - 2), bb(sb.begin(), sb.end() - 2);
  const size_t br = std::max(ba.size(), bb.size());
  while (ba.size() < br) ba.insert(ba.begin(), 1);
  while (bb.size() < br) bb.insert(bb.begin(), 1);
  std::vector<int64_t> batch(br);
  int64_t nb = 1;
  for (size_t d = 0; d < br; ++d) nb *= (batch[d] = std::max(ba[d], bb[d]));
  *out_shape = batch;
  if (!av) out_shape->push_back(m);
  if (!bv) out_shape->push_back(n);
  // Element (batch idx, i, j) of an operand in original (untransposed) row-major order.
  auto element = [](const Tensor& t, const std::vector<int64_t>& bshape, const std::vector<int64_t>& bidx,
                    int64_t i, int64_t j, bool trans, bool vec_left, bool vec_right) {
    const auto& s = t.shape;
    std::vector<int64_t> idx;
    const size_t tb = s.size() >= 2 && !(vec_left || vec_right) ? s.size() - 2 : 0;
    for (size_t d = 0; d < tb; ++d) {
      const size_t bd = bshape.size() - tb + d;
      idx.push_back(s[d] == 1 ? 0 : bidx[bd]);
    }
    if (vec_left) idx.push_back(j);
    else if (vec_right) idx.push_back(i);
    else if (trans) {
      idx.push_back(j);
      idx.push_back(i);
    } else {
      idx.push_back(i);
      idx.push_back(j);
    }
    int64_t linear = 0;
    for (size_t d = 0; d < s.size(); ++d) linear = linear * s[d] + idx[d];
    return t.at(linear);
  };
  std::vector<double> out(static_cast<size_t>(nb * m * n));
  std::vector<int64_t> bidx(br);
  for (int64_t bi = 0; bi < nb; ++bi) {
    int64_t rest = bi;
    for (int d = static_cast<int>(br) - 1; d >= 0; --d) {
      bidx[d] = rest % batch[d];
      rest /= batch[d];
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) {
          acc += element(a, batch, bidx, i, p, ta, av, false) * element(b, batch, bidx, p, j, tb, false, bv);
        }
        out[(bi * m + i) * n + j] = acc;
      }
  }
  return out;
}

void check_matmul(DLDataType t, Tensor a, Tensor b, bool ta, bool tb,
                  std::vector<int64_t> out_strides = {}, int64_t out_offset = 0) {
  std::vector<int64_t> shape;
  const std::vector<double> want = naive_matmul(a, b, ta, tb, &shape);
  const DLDataType ot = same(t, kI8) ? kI32 : t;
  Tensor c = out_strides.empty() ? make(ot, shape) : make_view(ot, shape, out_strides, out_offset);
  const Outcome r = invoke("dx.matmul", {&a, &b}, {&c},
                           {Attr::boolean("transpose_a", ta), Attr::boolean("transpose_b", tb)});
  ASSERT_TRUE(r.ok()) << r.message;
  ASSERT_EQ(c.count(), static_cast<int64_t>(want.size()));
  const int64_t k = (ta && a.shape.size() >= 2) ? a.shape[a.shape.size() - 2] : a.shape.back();
  for (size_t i = 0; i < want.size(); ++i) {
    if (same(t, kI8)) {
      ASSERT_EQ(c.at(static_cast<int64_t>(i)), want[i]);
    } else {
      const double tol = (same(t, kF64) ? 1e-12 : same(t, kF32) ? 1e-5 : same(t, kF16) ? 2e-3 : 1.6e-2) *
                         std::max(1.0, std::fabs(want[i])) * std::max<int64_t>(1, k) / 4;
      ASSERT_NEAR(c.at(static_cast<int64_t>(i)), want[i], tol) << "element " << i;
    }
  }
}

std::vector<double> small_values(int64_t n, int seed) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(((i + seed) * 37 % 17) - 8) / 4.0;
  return v;
}

TEST_F(CpuPlugin, MatmulShapesAndLayouts) {
  for (DLDataType t : {kF32, kF64, kF16, kBF16, kI8}) {
    SCOPED_TRACE(name_of(t));
    auto mk = [t](std::vector<int64_t> shape, int seed) {
      int64_t n = 1;
      for (auto s : shape) n *= s;
      auto v = small_values(n, seed);
      if (same(t, kI8)) for (auto& x : v) x *= 4;
      return make(t, std::move(shape), v);
    };
    check_matmul(t, mk({3, 4}, 1), mk({4, 5}, 2), false, false);
    check_matmul(t, mk({4, 3}, 1), mk({4, 5}, 2), true, false);
    check_matmul(t, mk({3, 4}, 1), mk({5, 4}, 2), false, true);
    check_matmul(t, mk({4, 3}, 1), mk({5, 4}, 2), true, true);
    check_matmul(t, mk({2, 3, 4}, 3), mk({4, 5}, 2), false, false);           // batch x matrix
    check_matmul(t, mk({3, 4}, 3), mk({2, 2, 4, 5}, 5), false, false);        // matrix x batch
    check_matmul(t, mk({2, 1, 3, 4}, 3), mk({3, 4, 2}, 6), false, false);     // broadcast both
    check_matmul(t, mk({2, 1, 4, 3}, 3), mk({3, 2, 4}, 6), true, true);       // with transposes
    check_matmul(t, mk({4}, 1), mk({4, 5}, 2), false, false);                 // vector x matrix
    check_matmul(t, mk({3, 4}, 1), mk({4}, 2), false, false);                 // matrix x vector
    check_matmul(t, mk({4}, 1), mk({4}, 2), false, false);                    // dot -> rank 0
    check_matmul(t, mk({4}, 1), mk({2, 4, 3}, 2), true, false);               // rank-1 ignores transpose
    check_matmul(t, mk({2, 3, 4}, 1), mk({4}, 2), false, true);
    check_matmul(t, mk({1, 4}, 1), mk({4, 1}, 2), false, false);              // 1x1 output
    check_matmul(t, mk({3, 4}, 1), mk({4, 5}, 2), false, false, {1, 3}, 2);   // column-major out
    check_matmul(t, mk({3, 4}, 1), mk({4, 5}, 2), false, false, {11, 2}, 1);  // strided out
    // Non-BLAS-compatible operand strides: every other column, and a broadcast (stride-0) matrix.
    Tensor sa = make_view(t, {3, 4}, {9, 2}, 1, small_values(12, 4));
    Tensor sb = make_view(t, {4, 5}, {0, 1}, 0, small_values(5, 5));
    check_matmul(t, sa, sb, false, false);
    Tensor ta = make_view(t, {2, 4, 3}, {0, 1, 4}, 0, small_values(24, 2));  // batch stride 0
    check_matmul(t, ta, mk({2, 4, 2}, 1), true, false);
    // Errors.
    Tensor a = mk({3, 4}, 1), b = mk({5, 4}, 1), c = make(same(t, kI8) ? kI32 : t, {3, 5});
    EXPECT_EQ(invoke("dx.matmul", {&a, &b}, {&c}, {}).code, DX_SHAPE_MISMATCH);
    Tensor bb = mk({4, 5}, 1), wrong = make(same(t, kI8) ? kI32 : t, {3, 6});
    EXPECT_EQ(invoke("dx.matmul", {&a, &bb}, {&wrong}, {}).code, DX_SHAPE_MISMATCH);
    Tensor scalar = mk({}, 1);
    EXPECT_EQ(invoke("dx.matmul", {&scalar, &bb}, {&c}, {}).code, DX_SHAPE_MISMATCH);
    Tensor b2 = mk({3, 4, 5}, 1), a2 = mk({2, 3, 4}, 1), c2 = make(same(t, kI8) ? kI32 : t, {3, 3, 5});
    EXPECT_EQ(invoke("dx.matmul", {&a2, &b2}, {&c2}, {}).code, DX_SHAPE_MISMATCH);
  }
}

TEST_F(CpuPlugin, MatmulLargeAndIntegerWrap) {
  // Large enough for OpenBLAS's threaded path and the parallel i8 loop.
  auto mk = [](DLDataType t, std::vector<int64_t> shape, int seed) {
    int64_t n = 1;
    for (auto s : shape) n *= s;
    return make(t, std::move(shape), small_values(n, seed));
  };
  check_matmul(kF32, mk(kF32, {100, 90}, 1), mk(kF32, {90, 110}, 2), false, false);
  check_matmul(kF32, mk(kF32, {90, 100}, 1), mk(kF32, {110, 90}, 2), true, true);
  check_matmul(kF64, mk(kF64, {3, 40, 30}, 1), mk(kF64, {30, 50}, 2), false, false);
  // Batches split over the threads (products big enough for the AVX-512 kernel): broadcast,
  // transposed, an odd count, f16/bf16 through f32.
  for (DLDataType t : {kF32, kF16, kBF16}) {
    SCOPED_TRACE(name_of(t));
    check_matmul(t, mk(t, {4, 40, 50}, 1), mk(t, {50, 60}, 2), false, false);
    check_matmul(t, mk(t, {3, 2, 50, 40}, 3), mk(t, {2, 33, 50}, 4), true, true);
    check_matmul(t, mk(t, {5, 40, 50}, 1), mk(t, {5, 50, 60}, 2), false, false);
  }

  Tensor a = make(kI8, {40, 300}), b = make(kI8, {300, 60});
  for (int64_t i = 0; i < a.count(); ++i) a.set_raw<int8_t>(i, static_cast<int8_t>((i * 31) % 256 - 128));
  for (int64_t i = 0; i < b.count(); ++i) b.set_raw<int8_t>(i, static_cast<int8_t>((i * 17) % 256 - 128));
  check_matmul(kI8, a, b, false, false);
  // Wrapping i32 accumulation: 128 * 128 * 2^17 overflows i32.
  const int64_t k = 1 << 17;
  Tensor wa = make(kI8, {1, k}), wb = make(kI8, {k, 1}), wc = make(kI32, {1, 1});
  for (int64_t i = 0; i < k; ++i) {
    wa.set_raw<int8_t>(i, -128);
    wb.set_raw<int8_t>(i, -128);
  }
  ASSERT_TRUE(invoke("dx.matmul", {&wa, &wb}, {&wc}, {}).ok());
  EXPECT_EQ(wc.raw<int32_t>(0), static_cast<int32_t>(static_cast<uint32_t>(16384) * static_cast<uint32_t>(k)));
}

TEST_F(CpuPlugin, ValidationErrors) {
  Tensor a = make(kF32, {2}), b = make(kF32, {2}), o = make(kF32, {2});
  // Wrong dtype for the kernel's signature.
  Tensor i = make(kI32, {2});
  const auto* k = find_kernel("dx.add", {kF32, kF32, kF32});
  ASSERT_NE(k, nullptr);
  const DLTensor* in[2] = {a.get(), i.get()};
  const DLTensor* out[1] = {o.get()};
  dx_kernel_call_t call{};
  call.struct_size = DX_KERNEL_CALL_SIZE_1_0;
  call.inputs = in;
  call.outputs = out;
  call.num_inputs = 2;
  call.num_outputs = 1;
  call.host = g_host.host();
  dx_error_t* e = k->desc.forward(&call);
  EXPECT_EQ(TestHost::error_code(e), DX_SHAPE_MISMATCH);
  TestHost::destroy_error(e);
  // Wrong arity.
  call.num_inputs = 1;
  e = k->desc.forward(&call);
  EXPECT_EQ(TestHost::error_code(e), DX_INVALID_ARGUMENT);
  TestHost::destroy_error(e);
  // Null tensor and null data.
  call.num_inputs = 2;
  in[1] = nullptr;
  e = k->desc.forward(&call);
  EXPECT_EQ(TestHost::error_code(e), DX_INVALID_ARGUMENT);
  TestHost::destroy_error(e);
  in[1] = b.get();
  b.dl.data = nullptr;
  e = k->desc.forward(&call);
  EXPECT_EQ(TestHost::error_code(e), DX_INVALID_ARGUMENT);
  TestHost::destroy_error(e);
  // Device memory is refused, not dereferenced.
  in[1] = b.get();
  b.dl.device = DLDevice{kDLCUDA, 0};
  e = k->desc.forward(&call);
  EXPECT_EQ(TestHost::error_code(e), DX_INVALID_ARGUMENT);
  TestHost::destroy_error(e);
  // Bad attribute type.
  Tensor x = make(kF32, {2, 2}), s = make(kF32, {2});
  dx_attr_t axes = Attr::f64("axes", 1.0);
  EXPECT_EQ(invoke("dx.sum", {&x}, {&s}, {axes}).code, DX_INVALID_ARGUMENT);
}

// ---- math, logic, cast, more reductions (elementwise_math.cc, reduce.cc) ---------------------

uint64_t bits_of(const Tensor& t, int64_t i) {
  uint64_t b = 0;
  std::memcpy(&b, t.storage.data() + t.position(i), t.element_size());
  return b;
}

// Each float-only unary op on hand-picked values with known exact results, every F dtype.
TEST_F(CpuPlugin, UnaryMathKnownValues) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  struct Case {
    const char* op;
    std::vector<double> in, want;
  };
  const std::vector<Case> cases = {
      {"dx.abs", {-3, -0.0, 2.5, -inf}, {3, 0, 2.5, inf}},
      {"dx.sign", {-3, -0.0, 0.0, 7, -inf}, {-1, 0, 0, 1, -1}},
      {"dx.reciprocal", {4, -0.5, 0.0, -0.0, inf}, {0.25, -2, inf, -inf, 0}},
      {"dx.sqrt", {4, 0.25, 0, inf}, {2, 0.5, 0, inf}},
      {"dx.rsqrt", {4, 0.25, 0, inf}, {0.5, 2, inf, 0}},
      {"dx.expm1", {0, -inf, inf}, {0, -1, inf}},
      {"dx.log", {1, 0, inf}, {0, -inf, inf}},
      {"dx.log1p", {0, -1, inf}, {0, -inf, inf}},
      {"dx.sin", {0}, {0}},
      {"dx.cos", {0}, {1}},
      {"dx.tan", {0}, {0}},
      {"dx.tanh", {0, inf, -inf}, {0, 1, -1}},
      {"dx.erf", {0, inf, -inf}, {0, 1, -1}},
      {"dx.sigmoid", {0, inf, -inf}, {0.5, 1, 0}},
      {"dx.silu", {0, inf, -inf}, {0, inf, -0.0}},
      {"dx.gelu", {0, inf, -inf}, {0, inf, -0.0}},
      {"dx.floor", {-1.5, 1.5, -0.0, 2}, {-2, 1, -0.0, 2}},
      {"dx.ceil", {-1.5, 1.5, 0.5, 2}, {-1, 2, 1, 2}},
      {"dx.round", {2.5, 3.5, -0.5, -2.5, 1.25}, {2, 4, -0.0, -2, 1}},
  };
  for (DLDataType t : kFloatTypes) {
    for (const Case& c : cases) {
      const auto n = static_cast<int64_t>(c.in.size());
      Tensor x = make(t, {n}, c.in), y = make(t, {n});
      ASSERT_TRUE(invoke(c.op, {&x}, {&y}).ok()) << c.op << " " << name_of(t);
      for (int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(y.at(i), c.want[i]) << c.op << " " << name_of(t) << " at " << i;
        EXPECT_EQ(std::signbit(y.at(i)), std::signbit(c.want[i])) << c.op << " " << name_of(t) << " at " << i;
      }
      // NaN propagates through every one of them.
      Tensor xn = make(t, {}, {nan}), yn = make(t, {});
      ASSERT_TRUE(invoke(c.op, {&xn}, {&yn}).ok());
      EXPECT_TRUE(std::isnan(yn.at(0))) << c.op << " " << name_of(t);
    }
    // Domain errors give NaN.
    Tensor neg = make(t, {2}, {-1, -4}), out = make(t, {2});
    ASSERT_TRUE(invoke("dx.sqrt", {&neg}, {&out}).ok());
    EXPECT_TRUE(std::isnan(out.at(0)) && std::isnan(out.at(1)));
    ASSERT_TRUE(invoke("dx.log", {&neg}, {&out}).ok());
    EXPECT_TRUE(std::isnan(out.at(0)));
  }
}

// f32 results are the f64 libm value rounded once (what the reference computes), on a sweep.
TEST_F(CpuPlugin, UnaryMathF32IsF64RoundedOnce) {
  const int64_t n = 2001;
  std::vector<double> xs(n);
  for (int64_t i = 0; i < n; ++i) xs[i] = static_cast<float>(-12.0 + 24.0 * static_cast<double>(i) / (n - 1));
  Tensor x = make(kF32, {n}, xs), y = make(kF32, {n});
  const std::vector<std::pair<const char*, std::function<double(double)>>> fns = {
      {"dx.sin", [](double v) { return std::sin(v); }},
      {"dx.erf", [](double v) { return std::erf(v); }},
      {"dx.expm1", [](double v) { return std::expm1(v); }},
  };
  for (const auto& [op, f] : fns) {
    ASSERT_TRUE(invoke(op, {&x}, {&y}).ok()) << op;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(y.raw<float>(i), static_cast<float>(f(xs[i]))) << op << " at x = " << xs[i];
    }
  }
  // tanh, sigmoid, silu and the f32 gelu run branch-free f32 versions (fast_math.h): within
  // 4 ulp of the f64 value rounded once (the suite's limits are 8 for tanh, 4 for the others;
  // fast_math_test holds gelu to 2 ulp with FMA, 3 without).
  const std::vector<std::pair<const char*, std::function<double(double)>>> fast = {
      {"dx.tanh", [](double v) { return std::tanh(v); }},
      {"dx.sigmoid", [](double v) { return 1.0 / (1.0 + std::exp(-v)); }},
      {"dx.silu", [](double v) { return v / (1.0 + std::exp(-v)); }},
      {"dx.gelu", [](double v) { return 0.5 * v * std::erfc(-v / std::sqrt(2.0)); }},
  };
  auto ulp_distance = [](float a, float b) {
    auto key = [](float f) {
      const int32_t i = std::bit_cast<int32_t>(f);
      return i < 0 ? int64_t{INT32_MIN} - i : int64_t{i};
    };
    return std::llabs(key(a) - key(b));
  };
  for (const auto& [op, f] : fast) {
    ASSERT_TRUE(invoke(op, {&x}, {&y}).ok()) << op;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_LE(ulp_distance(y.raw<float>(i), static_cast<float>(f(xs[i]))), 4)
          << op << " at x = " << xs[i];
    }
  }
  // gelu's tanh form, selected by the string attribute; an unknown mode is refused.
  dx_attr_t mode{"approximate", DX_ATTR_STRING, 0, 4, {}};
  mode.value.str = "tanh";
  ASSERT_TRUE(invoke("dx.gelu", {&x}, {&y}, {mode}).ok());
  for (int64_t i = 0; i < n; ++i) {
    const double v = xs[i];
    const double want = 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    ASSERT_LE(ulp_distance(y.raw<float>(i), static_cast<float>(want)), 4) << "gelu tanh at x = " << v;
  }
  mode.value.str = "fast";
  EXPECT_EQ(invoke("dx.gelu", {&x}, {&y}, {mode}).code, DX_INVALID_ARGUMENT);
}

TEST_F(CpuPlugin, IntegerAbsSignClamp) {
  Tensor x = make(kI8, {5}, {-128, -5, 0, 7, 127}), y = make(kI8, {5});
  ASSERT_TRUE(invoke("dx.abs", {&x}, {&y}).ok());
  EXPECT_EQ(y.values(), (std::vector<double>{-128, 5, 0, 7, 127}));  // abs(INT_MIN) wraps
  ASSERT_TRUE(invoke("dx.sign", {&x}, {&y}).ok());
  EXPECT_EQ(y.values(), (std::vector<double>{-1, -1, 0, 1, 1}));
  ASSERT_TRUE(invoke("dx.clamp", {&x}, {&y}, {Attr::i64("min", -3), Attr::i64("max", 1000)}).ok());
  EXPECT_EQ(y.values(), (std::vector<double>{-3, -3, 0, 7, 127}));
  // f64 bounds round inward (min 1.5 -> 2, max 6.5 -> 6).
  ASSERT_TRUE(invoke("dx.clamp", {&x}, {&y}, {Attr::f64("min", 1.5), Attr::f64("max", 6.5)}).ok());
  EXPECT_EQ(y.values(), (std::vector<double>{2, 2, 2, 6, 6}));
  // min > max gives max; a NaN bound is refused on integers.
  ASSERT_TRUE(invoke("dx.clamp", {&x}, {&y}, {Attr::i64("min", 5), Attr::i64("max", 1)}).ok());
  EXPECT_EQ(y.values(), (std::vector<double>{1, 1, 1, 1, 1}));
  EXPECT_EQ(invoke("dx.clamp", {&x}, {&y}, {Attr::f64("min", std::nan(""))}).code, DX_INVALID_ARGUMENT);
  // Floats: NaN in x or a bound propagates; only one bound.
  Tensor f = make(kF32, {4}, {-2, 0.5, 3, std::nan("")}), g = make(kF32, {4});
  ASSERT_TRUE(invoke("dx.clamp", {&f}, {&g}, {Attr::none("min"), Attr::f64("max", 1)}).ok());
  EXPECT_EQ(g.at(0), -2);
  EXPECT_EQ(g.at(1), 0.5);
  EXPECT_EQ(g.at(2), 1);
  EXPECT_TRUE(std::isnan(g.at(3)));
  ASSERT_TRUE(invoke("dx.clamp", {&f}, {&g}, {Attr::f64("min", std::nan(""))}).ok());
  EXPECT_TRUE(std::isnan(g.at(0)));
}

TEST_F(CpuPlugin, PowMaximumMinimum) {
  for (DLDataType t : kFloatTypes) {
    Tensor a = make(t, {2, 1}, {2, -3}), b = make(t, {3}, {0, 1, 3}), o = make(t, {2, 3});
    ASSERT_TRUE(invoke("dx.pow", {&a, &b}, {&o}).ok());
    EXPECT_EQ(o.values(), (std::vector<double>{1, 2, 8, 1, -3, -27})) << name_of(t);
    const double nan = std::nan("");
    Tensor x = make(t, {4}, {1, nan, 5, -1}), y = make(t, {4}, {2, 0, nan, -7}), m = make(t, {4});
    ASSERT_TRUE(invoke("dx.maximum", {&x, &y}, {&m}).ok());
    EXPECT_EQ(m.at(0), 2);
    EXPECT_TRUE(std::isnan(m.at(1)) && std::isnan(m.at(2)));
    EXPECT_EQ(m.at(3), -1);
    ASSERT_TRUE(invoke("dx.minimum", {&x, &y}, {&m}).ok());
    EXPECT_EQ(m.at(0), 1);
    EXPECT_TRUE(std::isnan(m.at(1)) && std::isnan(m.at(2)));
    EXPECT_EQ(m.at(3), -7);
  }
  // A tie of +0 and -0 returns the second operand (`a > b ? a : b`, as the reference).
  Tensor pz = make(kF32, {}, {0.0}), nz = make(kF32, {}, {-0.0}), r = make(kF32, {});
  ASSERT_TRUE(invoke("dx.maximum", {&pz, &nz}, {&r}).ok());
  EXPECT_TRUE(std::signbit(r.at(0)));
  Tensor ia = make(kU8, {3}, {0, 200, 7}), ib = make(kU8, {}, {100}), io = make(kU8, {3});
  ASSERT_TRUE(invoke("dx.maximum", {&ia, &ib}, {&io}).ok());
  EXPECT_EQ(io.values(), (std::vector<double>{100, 200, 100}));
}

TEST_F(CpuPlugin, ComparisonsAndLogic) {
  const double nan = std::nan("");
  for (DLDataType t : kFloatTypes) {
    Tensor a = make(t, {4}, {1, 2, nan, -0.0}), b = make(t, {4}, {2, 2, nan, 0.0}), o = make(kBool, {4});
    const std::vector<std::pair<const char*, std::vector<double>>> want = {
        {"dx.eq", {0, 1, 0, 1}}, {"dx.ne", {1, 0, 1, 0}}, {"dx.lt", {1, 0, 0, 0}},
        {"dx.le", {1, 1, 0, 1}}, {"dx.gt", {0, 0, 0, 0}}, {"dx.ge", {0, 1, 0, 1}}};
    for (const auto& [op, w] : want) {
      ASSERT_TRUE(invoke(op, {&a, &b}, {&o}).ok()) << op;
      EXPECT_EQ(o.values(), w) << op << " " << name_of(t);
    }
  }
  // Integers with broadcasting; bool inputs read any non-zero byte as true.
  Tensor a = make(kI16, {2, 1}, {-1, 3}), b = make(kI16, {3}, {-1, 0, 3}), o = make(kBool, {2, 3});
  ASSERT_TRUE(invoke("dx.lt", {&a, &b}, {&o}).ok());
  EXPECT_EQ(o.values(), (std::vector<double>{0, 1, 1, 0, 0, 0}));
  Tensor p = make(kBool, {4}), q = make(kBool, {4}, {0, 1, 0, 1}), r = make(kBool, {4});
  p.set_raw<uint8_t>(0, 0);
  p.set_raw<uint8_t>(1, 0);
  p.set_raw<uint8_t>(2, 2);
  p.set_raw<uint8_t>(3, 255);
  ASSERT_TRUE(invoke("dx.logical_and", {&p, &q}, {&r}).ok());
  EXPECT_EQ(r.values(), (std::vector<double>{0, 0, 0, 1}));
  ASSERT_TRUE(invoke("dx.logical_or", {&p, &q}, {&r}).ok());
  EXPECT_EQ(r.values(), (std::vector<double>{0, 1, 1, 1}));
  ASSERT_TRUE(invoke("dx.logical_xor", {&p, &q}, {&r}).ok());
  EXPECT_EQ(r.values(), (std::vector<double>{0, 1, 1, 0}));
  ASSERT_TRUE(invoke("dx.eq", {&p, &q}, {&r}).ok());
  EXPECT_EQ(r.values(), (std::vector<double>{1, 0, 0, 1}));
  ASSERT_TRUE(invoke("dx.logical_not", {&p}, {&r}).ok());
  EXPECT_EQ(r.values(), (std::vector<double>{1, 1, 0, 0}));
  ASSERT_TRUE(invoke("dx.bitwise_not", {&p}, {&r}).ok());
  EXPECT_EQ(r.values(), (std::vector<double>{1, 1, 0, 0}));
  Tensor i8 = make(kI8, {2}, {5, -128}), i8o = make(kI8, {2});
  ASSERT_TRUE(invoke("dx.bitwise_not", {&i8}, {&i8o}).ok());
  EXPECT_EQ(i8o.values(), (std::vector<double>{-6, 127}));
  Tensor u8 = make(kU8, {1}, {0}), u8o = make(kU8, {1});
  ASSERT_TRUE(invoke("dx.bitwise_not", {&u8}, {&u8o}).ok());
  EXPECT_EQ(u8o.at(0), 255);
  Tensor bad = make(kBool, {3});
  EXPECT_EQ(invoke("dx.eq", {&a, &b}, {&bad}).code, DX_SHAPE_MISMATCH);
}

TEST_F(CpuPlugin, WhereCopiesBitsWithBroadcasting) {
  Tensor c = make(kBool, {2, 1}, {1, 0}), a = make(kF32, {3}, {1, 2, 3}), b = make(kF32, {}, {0}),
         o = make(kF32, {2, 3});
  a.set_raw<uint32_t>(1, 0x7fc01234u);  // a NaN payload survives
  ASSERT_TRUE(invoke("dx.where", {&c, &a, &b}, {&o}).ok());
  EXPECT_EQ(o.at(0), 1);
  EXPECT_EQ(o.raw<uint32_t>(1), 0x7fc01234u);
  EXPECT_EQ(o.at(2), 3);
  EXPECT_EQ(o.values()[3], 0);
  EXPECT_EQ(o.at(5), 0);
  // Strided condition, i64 values.
  Tensor cs = make_view(kBool, {3}, {2}, 1, {1, 0, 1}), x = make(kI64, {3}, {7, 8, 9}),
         y = make(kI64, {3}, {-1, -2, -3}), z = make(kI64, {3});
  ASSERT_TRUE(invoke("dx.where", {&cs, &x, &y}, {&z}).ok());
  EXPECT_EQ(z.values(), (std::vector<double>{7, -2, 9}));
}

TEST_F(CpuPlugin, CastConversions) {
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  // Float -> int: truncate toward zero, saturate, NaN -> 0.
  Tensor f = make(kF32, {6}, {-2.7, 2.7, 1e10, -1e10, nan, -inf}), i = make(kI32, {6});
  ASSERT_TRUE(invoke("dx.cast", {&f}, {&i}).ok());
  EXPECT_EQ(i.values(), (std::vector<double>{-2, 2, 2147483647, -2147483648.0, 0, -2147483648.0}));
  Tensor d = make(kF64, {3}, {-1, 300, 255.9}), u = make(kU8, {3});
  ASSERT_TRUE(invoke("dx.cast", {&d}, {&u}).ok());
  EXPECT_EQ(u.values(), (std::vector<double>{0, 255, 255}));
  // Float -> bool: != 0 (NaN is true, -0 false).
  Tensor fb = make(kF16, {3}, {nan, -0.0, 0.5}), b = make(kBool, {3});
  ASSERT_TRUE(invoke("dx.cast", {&fb}, {&b}).ok());
  EXPECT_EQ(b.values(), (std::vector<double>{1, 0, 1}));
  // Int -> int wraps; bool reads any non-zero byte as 1.
  Tensor w = make(kI32, {2}, {300, -1}), w8 = make(kI8, {2});
  ASSERT_TRUE(invoke("dx.cast", {&w}, {&w8}).ok());
  EXPECT_EQ(w8.values(), (std::vector<double>{44, -1}));
  Tensor bb = make(kBool, {1}), bi = make(kI32, {1});
  bb.set_raw<uint8_t>(0, 2);
  ASSERT_TRUE(invoke("dx.cast", {&bb}, {&bi}).ok());
  EXPECT_EQ(bi.at(0), 1);
  // i64 -> bf16 rounds once: 2^62 + 2^54 + 1 is above the halfway point, so it rounds up
  // (through f64 with round-to-nearest it would tie and round down to even).
  Tensor big = make(kI64, {1}), bf = make(kBF16, {1});
  big.set_raw<int64_t>(0, (int64_t{1} << 62) + (int64_t{1} << 54) + 1);
  ASSERT_TRUE(invoke("dx.cast", {&big}, {&bf}).ok());
  EXPECT_EQ(bf.at(0), std::ldexp(1.0, 62) + std::ldexp(1.0, 55));
  // f64 -> f16 overflows to Inf, rounds to nearest even; f16 -> f32 exact.
  Tensor wide = make(kF64, {2}, {70000, 1 + std::ldexp(1.0, -11)}), h = make(kF16, {2});
  ASSERT_TRUE(invoke("dx.cast", {&wide}, {&h}).ok());
  EXPECT_EQ(h.at(0), inf);
  EXPECT_EQ(h.at(1), 1.0);
  Tensor back = make(kF32, {2});
  ASSERT_TRUE(invoke("dx.cast", {&h}, {&back}).ok());
  EXPECT_EQ(back.at(0), inf);
  // The dtype attribute must name the output dtype.
  dx_attr_t name{"dtype", DX_ATTR_STRING, 0, 3, {}};
  name.value.str = "f32";
  EXPECT_TRUE(invoke("dx.cast", {&h}, {&back}, {name}).ok());
  name.value.str = "f64";
  EXPECT_EQ(invoke("dx.cast", {&h}, {&back}, {name}).code, DX_INVALID_ARGUMENT);
  EXPECT_TRUE(invoke("dx.cast", {&h}, {&back}, {Attr::i64("dtype", kDLFloat | (32 << 8) | (1 << 16))}).ok());
  // Every one of the 100 pairs is registered.
  const std::vector<DLDataType> all = {kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool};
  for (DLDataType from : all)
    for (DLDataType to : all) EXPECT_NE(find_kernel("dx.cast", {from, to}), nullptr) << name_of(from) << name_of(to);
}

TEST_F(CpuPlugin, MeanProdMin) {
  const std::vector<int64_t> ax1 = {1};
  for (DLDataType t : kFloatTypes) {
    Tensor x = make(t, {2, 3}, {1, 2, 3, 4, -5, 6}), o = make(t, {2});
    ASSERT_TRUE(invoke("dx.mean", {&x}, {&o}, reduce_attrs(&ax1, false)).ok());
    EXPECT_EQ(o.at(0), 2);
    EXPECT_NEAR(o.at(1), 5.0 / 3.0, tolerance(t, 2));
    ASSERT_TRUE(invoke("dx.prod", {&x}, {&o}, reduce_attrs(&ax1, false)).ok());
    EXPECT_EQ(o.values(), (std::vector<double>{6, -120}));
    ASSERT_TRUE(invoke("dx.min", {&x}, {&o}, reduce_attrs(&ax1, false)).ok());
    EXPECT_EQ(o.values(), (std::vector<double>{1, -5}));
    Tensor e = make(t, {0}), s = make(t, {});
    ASSERT_TRUE(invoke("dx.mean", {&e}, {&s}, reduce_attrs(nullptr, false)).ok());
    EXPECT_TRUE(std::isnan(s.at(0)));
    ASSERT_TRUE(invoke("dx.prod", {&e}, {&s}, reduce_attrs(nullptr, false)).ok());
    EXPECT_EQ(s.at(0), 1);
    EXPECT_EQ(invoke("dx.min", {&e}, {&s}, reduce_attrs(nullptr, false)).code, DX_INVALID_ARGUMENT);
    Tensor n = make(t, {3}, {1, std::nan(""), -4});
    ASSERT_TRUE(invoke("dx.min", {&n}, {&s}, reduce_attrs(nullptr, false)).ok());
    EXPECT_TRUE(std::isnan(s.at(0)));
  }
  // Integers: mean in f64 from an exact sum, prod in i64 with wrap, min in the dtype.
  Tensor i = make(kI64, {3}), m = make(kF64, {}), p = make(kI64, {}), mn = make(kI64, {});
  i.set_raw<int64_t>(0, std::numeric_limits<int64_t>::max());
  i.set_raw<int64_t>(1, std::numeric_limits<int64_t>::max());
  i.set_raw<int64_t>(2, 4);
  ASSERT_TRUE(invoke("dx.mean", {&i}, {&m}, reduce_attrs(nullptr, false)).ok());
  EXPECT_EQ(m.at(0), (2.0 * 9223372036854775807.0 + 4) / 3);  // no i64 overflow in the sum
  ASSERT_TRUE(invoke("dx.prod", {&i}, {&p}, reduce_attrs(nullptr, false)).ok());
  EXPECT_EQ(p.raw<int64_t>(0), 4);  // (2^63 - 1)^2 * 4 wraps to 4
  ASSERT_TRUE(invoke("dx.min", {&i}, {&mn}, reduce_attrs(nullptr, false)).ok());
  EXPECT_EQ(mn.raw<int64_t>(0), 4);
  Tensor u = make(kU8, {2, 2}, {200, 2, 3, 4}), up = make(kI64, {2}), um = make(kF64, {2});
  const std::vector<int64_t> ax0 = {0};
  ASSERT_TRUE(invoke("dx.prod", {&u}, {&up}, reduce_attrs(&ax0, false)).ok());
  EXPECT_EQ(up.values(), (std::vector<double>{600, 8}));
  ASSERT_TRUE(invoke("dx.mean", {&u}, {&um}, reduce_attrs(&ax0, false)).ok());
  EXPECT_EQ(um.values(), (std::vector<double>{101.5, 3}));
  // An empty reduced set is an error for min even when the output is empty too (as the reference).
  Tensor ee = make(kF32, {0, 0}), eo = make(kF32, {0});
  EXPECT_EQ(invoke("dx.min", {&ee}, {&eo}, reduce_attrs(&ax0, false)).code, DX_INVALID_ARGUMENT);
}

TEST_F(CpuPlugin, ArgmaxArgmin) {
  auto arg_attrs = [](std::optional<int64_t> axis, bool keep) {
    return std::vector<dx_attr_t>{axis ? Attr::i64("axis", *axis) : Attr::none("axis"), Attr::boolean("keepdims", keep)};
  };
  for (DLDataType t : kFloatTypes) {
    Tensor x = make(t, {2, 3}, {3, 1, 3, 1, 5, 1}), s = make(kI64, {});
    ASSERT_TRUE(invoke("dx.argmax", {&x}, {&s}, arg_attrs(std::nullopt, false)).ok());
    EXPECT_EQ(s.at(0), 4);
    ASSERT_TRUE(invoke("dx.argmin", {&x}, {&s}, arg_attrs(std::nullopt, false)).ok());
    EXPECT_EQ(s.at(0), 1);  // first of the ties
    Tensor r = make(kI64, {3});
    ASSERT_TRUE(invoke("dx.argmax", {&x}, {&r}, arg_attrs(0, false)).ok());
    EXPECT_EQ(r.values(), (std::vector<double>{0, 1, 0}));
    Tensor k = make(kI64, {2, 1});
    ASSERT_TRUE(invoke("dx.argmin", {&x}, {&k}, arg_attrs(-1, true)).ok());
    EXPECT_EQ(k.values(), (std::vector<double>{1, 0}));
    Tensor all1 = make(kI64, {1, 1});
    ASSERT_TRUE(invoke("dx.argmax", {&x}, {&all1}, arg_attrs(std::nullopt, true)).ok());
    EXPECT_EQ(all1.at(0), 4);
    // The first NaN wins for both.
    Tensor n = make(t, {4}, {1, std::nan(""), 9, std::nan("")});
    ASSERT_TRUE(invoke("dx.argmax", {&n}, {&s}, arg_attrs(std::nullopt, false)).ok());
    EXPECT_EQ(s.at(0), 1);
    ASSERT_TRUE(invoke("dx.argmin", {&n}, {&s}, arg_attrs(std::nullopt, false)).ok());
    EXPECT_EQ(s.at(0), 1);
  }
  // Rank 0 accepts axis 0 / -1; other axes are out of range; empty sets are errors.
  Tensor z = make(kI32, {}, {7}), s = make(kI64, {});
  ASSERT_TRUE(invoke("dx.argmax", {&z}, {&s}, arg_attrs(-1, false)).ok());
  EXPECT_EQ(s.at(0), 0);
  EXPECT_EQ(invoke("dx.argmax", {&z}, {&s}, arg_attrs(1, false)).code, DX_OUT_OF_RANGE);
  Tensor e = make(kI32, {0});
  EXPECT_EQ(invoke("dx.argmin", {&e}, {&s}, arg_attrs(std::nullopt, false)).code, DX_INVALID_ARGUMENT);
  // Large and strided: a transposed view, parallel over outputs; one long flattened reduction.
  const int64_t rows = 300, cols = 500;
  Tensor big = make(kF32, {rows * cols}, iota(rows * cols, 0, 0));
  big.set(123457, 5);
  big.set(140000, 5);  // a later tie: the first index wins
  ASSERT_TRUE(invoke("dx.argmax", {&big}, {&s}, arg_attrs(std::nullopt, false)).ok());
  EXPECT_EQ(s.at(0), 123457);
  Tensor tv = make_view(kF32, {cols, rows}, {1, cols}, 0);  // transposed view of [rows, cols]
  for (int64_t i = 0; i < rows * cols; ++i) tv.set(i, static_cast<double>((i * 7919) % 1009));
  Tensor per_row = make(kI64, {cols});
  ASSERT_TRUE(invoke("dx.argmin", {&tv}, {&per_row}, arg_attrs(1, false)).ok());
  for (int64_t r = 0; r < cols; ++r) {
    int64_t best = 0;
    for (int64_t c = 1; c < rows; ++c)
      if (tv.at(r * rows + c) < tv.at(r * rows + best)) best = c;
    ASSERT_EQ(per_row.at(r), best) << r;
  }
}

// All 100 cast signatures against an independent element-by-element model (the conformance suite
// certifies one signature per input dtype; this covers the rest).
TEST_F(CpuPlugin, CastEveryPairMatchesModel) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  const std::vector<double> float_values = {0, -0.0, 1, -1, 2.5, -2.7, 127.9, 128, 255, 256, 300, -129,
                                            -32769, 65504, 70000, 3e9, 1e10, -1e10, inf, -inf, nan,
                                            1e-8, 3.140625};
  const std::vector<double> int_values = {0, 1, -1, 5, 127, 128, -128, 255, 256, 300, -129, 32767, -32768,
                                          65535, 2147483647, -2147483648.0};
  const std::vector<DLDataType> all = {kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool};
  auto int_range = [](DLDataType t, double& lo, double& hi) {
    if (t.code == kDLUInt) { lo = 0; hi = 255; return; }
    hi = std::ldexp(1.0, t.bits - 1) - 1;
    lo = -std::ldexp(1.0, t.bits - 1);
  };
  for (DLDataType from : all) {
    const auto& values = is_float(from) ? float_values : int_values;
    const auto n = static_cast<int64_t>(values.size());
    Tensor x = make(from, {n}, values);
    for (DLDataType to : all) {
      Tensor y = make(to, {n});
      ASSERT_TRUE(invoke("dx.cast", {&x}, {&y}).ok()) << name_of(from) << " -> " << name_of(to);
      for (int64_t i = 0; i < n; ++i) {
        const double v = x.at(i);  // the input's exact value
        double want;
        if (same(to, kBool)) {
          want = v != 0 ? 1 : 0;  // NaN is true
        } else if (is_float(to)) {
          Tensor tmp = make(to, {1}, {v});
          want = tmp.at(0);
        } else if (is_float(from)) {
          double lo, hi;
          int_range(to, lo, hi);
          want = std::isnan(v) ? 0 : std::min(std::max(std::trunc(v), lo), hi);
        } else if (to.bits == 64) {
          want = v;  // every test value fits
        } else {
          double lo, hi;
          int_range(to, lo, hi);
          const double span = hi - lo + 1;
          want = std::fmod(v - lo, span);
          if (want < 0) want += span;
          want += lo;  // two's complement wrap
        }
        const double got = y.at(i);
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(got)) << name_of(from) << " -> " << name_of(to) << " of " << v;
        } else {
          EXPECT_EQ(got, want) << name_of(from) << " -> " << name_of(to) << " of " << v;
          if (is_float(to)) EXPECT_EQ(std::signbit(got), std::signbit(want)) << name_of(from) << " -> " << name_of(to) << " of " << v;
        }
      }
    }
  }
}

}  // namespace
