// The exported entry of libdeepx-plugin-cpu.so: picks the instruction-set variant of the kernels.
//
// CMakeLists.txt compiles every kernel source once per variant: baseline x86-64 (SSE2) in
// namespace deepx::cpu, and e.g. x86-64-v3 (AVX2, FMA, F16C) and x86-64-v4 (AVX-512) with the
// namespace renamed to deepx_x86_64_v3 / deepx_x86_64_v4 so the copies never collide. This file
// is compiled for baseline only; it asks the CPU which variants it can run and hands the host
// the best one's descriptor. DEEPX_CPU_ISA=baseline|x86-64-v3|x86-64-v4 forces one (for
// certification of each variant, or to rule one out when chasing a bug); "auto" or unset picks.
// A variant the CPU cannot run or this build lacks is refused at init with a clear error,
// never run (it would die of an illegal instruction).
#include <array>
#include <cstdlib>
#include <cstring>
#include <string>

#include <deepx/plugin.h>

namespace deepx::cpu {
const dx_plugin_t* plugin_descriptor();
}
#if DEEPX_CPU_HAVE_X86_64_V3
namespace deepx_x86_64_v3::cpu {
const dx_plugin_t* plugin_descriptor();
}
#endif
#if DEEPX_CPU_HAVE_X86_64_V4
namespace deepx_x86_64_v4::cpu {
const dx_plugin_t* plugin_descriptor();
}
#endif

namespace {

struct Variant {
  const char* name;
  bool (*cpu_can_run)();
  const dx_plugin_t* (*descriptor)();
};

// Best first. __builtin_cpu_supports checks the CPUID bits and that the OS saves the vector state.
constexpr std::array kVariants = {
#if DEEPX_CPU_HAVE_X86_64_V4
    Variant{"x86-64-v4", [] { return __builtin_cpu_supports("x86-64-v4") != 0; },
            &deepx_x86_64_v4::cpu::plugin_descriptor},
#endif
#if DEEPX_CPU_HAVE_X86_64_V3
    Variant{"x86-64-v3", [] { return __builtin_cpu_supports("x86-64-v3") != 0; },
            &deepx_x86_64_v3::cpu::plugin_descriptor},
#endif
    Variant{"baseline", [] { return true; }, &deepx::cpu::plugin_descriptor},
};

std::string compiled_variants() {
  std::string names;
  for (const Variant& v : kVariants) names += (names.empty() ? "" : ", ") + std::string(v.name);
  return names;
}

std::string requested() {
  const char* wanted = std::getenv("DEEPX_CPU_ISA");
  return wanted ? wanted : "";
}

// Stand-in descriptors for a refused DEEPX_CPU_ISA: they load like the real plugin (same name,
// so the operator sees which plugin failed) and fail init with the reason, which the host
// reports as the plugin's load error. The entry only picks a pointer (it may run on any thread
// and must not allocate); the message is built in init.
dx_error_t* refuse_unsupported(const dx_host_t* host, dx_host_context_t*, void**) {
  if (host == nullptr || host->error_create == nullptr) return nullptr;
  try {
    const std::string why = "cpu: DEEPX_CPU_ISA=" + requested() +
                            " asks for instructions this CPU (or its OS) does not support; "
                            "unset it or use one of: " + compiled_variants();
    return host->error_create(DX_UNSUPPORTED, why.c_str());
  } catch (...) {
    return host->error_create(DX_UNSUPPORTED, "cpu: DEEPX_CPU_ISA names an unsupported variant");
  }
}

dx_error_t* refuse_unknown(const dx_host_t* host, dx_host_context_t*, void**) {
  if (host == nullptr || host->error_create == nullptr) return nullptr;
  try {
    const std::string why = "cpu: DEEPX_CPU_ISA=" + requested() +
                            " names no variant of this build; use auto or one of: " +
                            compiled_variants();
    return host->error_create(DX_UNSUPPORTED, why.c_str());
  } catch (...) {
    return host->error_create(DX_UNSUPPORTED, "cpu: DEEPX_CPU_ISA names no variant of this build");
  }
}

void no_shutdown(void*) {}

constexpr dx_plugin_t refusal(dx_error_t* (*init)(const dx_host_t*, dx_host_context_t*, void**)) {
  return dx_plugin_t{
      DX_PLUGIN_SIZE_1_0,
      DX_ABI_VERSION,
      0,
      "cpu",
      "deepx",
      "0",
      "refused",
      DX_PLUGIN_CAP_KERNELS,
      init,
      &no_shutdown,
      nullptr,
  };
}
constexpr dx_plugin_t kRefuseUnsupported = refusal(&refuse_unsupported);
constexpr dx_plugin_t kRefuseUnknown = refusal(&refuse_unknown);

const dx_plugin_t* choose_variant() {
  __builtin_cpu_init();  // idempotent; makes __builtin_cpu_supports safe however early we run
  const char* wanted = std::getenv("DEEPX_CPU_ISA");
  const bool automatic = wanted == nullptr || *wanted == '\0' || std::strcmp(wanted, "auto") == 0;
  for (const Variant& v : kVariants) {
    if (automatic ? v.cpu_can_run() : std::strcmp(wanted, v.name) == 0) {
      return v.cpu_can_run() ? v.descriptor() : &kRefuseUnsupported;
    }
  }
  return &kRefuseUnknown;
}

}  // namespace

extern "C" DX_EXPORT const dx_plugin_t* dx_plugin_entry(uint32_t host_abi_min,
                                                        uint32_t host_abi_max) {
  // Serve any host whose range includes our major (any minor of it loads).
  const unsigned ours = DX_ABI_VERSION_MAJOR;
  if (DX_VERSION_MAJOR(host_abi_min) > ours || DX_VERSION_MAJOR(host_abi_max) < ours) {
    return nullptr;
  }
  return choose_variant();
}
