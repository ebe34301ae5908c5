// The "cpu" memory space: ordinary host memory, 64-byte aligned, synchronous (no streams,
// events or IPC: the null slots tell the host so).
#include <malloc.h>
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "kernels.h"
#include "strided.h"

namespace deepx::cpu {
namespace {

constexpr uint64_t kAlignment = 64;
/// Copies and fills at least this large are split across OpenMP threads (one thread cannot
/// saturate the memory bus on most machines).
constexpr uint64_t kParallelBytes = uint64_t{1} << 22;

const dx_host_t* host_of(void* space_data) { return static_cast<PluginState*>(space_data)->host; }

// Statistics count the allocator's usable size of each block: free() gets no size, and
// malloc_usable_size gives the same number at both ends.
void count_alloc(void* space_data, void* p) {
  auto* state = static_cast<PluginState*>(space_data);
  const uint64_t bytes = malloc_usable_size(p);
  const uint64_t now = state->in_use_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  uint64_t peak = state->peak_in_use_bytes.load(std::memory_order_relaxed);
  while (now > peak && !state->peak_in_use_bytes.compare_exchange_weak(
                           peak, now, std::memory_order_relaxed)) {
  }
  state->live_allocations.fetch_add(1, std::memory_order_relaxed);
}

void count_free(void* space_data, void* p) {
  auto* state = static_cast<PluginState*>(space_data);
  state->in_use_bytes.fetch_sub(malloc_usable_size(p), std::memory_order_relaxed);
  state->live_allocations.fetch_sub(1, std::memory_order_relaxed);
}


/// Splits [0, size) into per-thread pieces aligned to 64 bytes and calls body(begin, end).
template <class Body>
void split_bytes(uint64_t size, Body&& body) {
  const int threads = available_threads();
  if (threads <= 1 || size < kParallelBytes) {
    body(uint64_t{0}, size);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const uint64_t team = static_cast<uint64_t>(omp_get_num_threads());
    const uint64_t me = static_cast<uint64_t>(omp_get_thread_num());
    uint64_t chunk = (size + team - 1) / team;
    chunk = (chunk + kAlignment - 1) / kAlignment * kAlignment;
    const uint64_t begin = std::min(size, me * chunk);
    const uint64_t end = std::min(size, begin + chunk);
    if (begin < end) body(begin, end);
  }
}

dx_error_t* space_alloc(void* space_data, uint64_t size, dx_stream_t, void** out_ptr) {
  return guard(host_of(space_data), [&] {
    if (out_ptr == nullptr) fail(DX_INVALID_ARGUMENT, "cpu: alloc: out_ptr is null");
    if (size == 0) {
      *out_ptr = nullptr;
      return;
    }
    if (size > UINT64_MAX - kAlignment || size > SIZE_MAX - kAlignment) {
      fail(DX_OUT_OF_MEMORY, "cpu: alloc: size too large");
    }
    const uint64_t rounded = (size + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, static_cast<size_t>(rounded));
    if (p == nullptr) {
      fail(DX_OUT_OF_MEMORY, "cpu: alloc: cannot allocate " + std::to_string(size) + " bytes");
    }
    count_alloc(space_data, p);
    *out_ptr = p;
  });
}

dx_error_t* space_free(void* space_data, void* ptr, dx_stream_t) {
  if (ptr == nullptr) return nullptr;
  count_free(space_data, ptr);
  std::free(ptr);
  return nullptr;
}

dx_error_t* space_copy(void* space_data, void* dst, const void* src, uint64_t size,
                       int32_t direction, dx_stream_t) {
  return guard(host_of(space_data), [&] {
    if (direction < DX_COPY_HOST_TO_DEVICE || direction > DX_COPY_DEVICE_TO_DEVICE) {
      fail(DX_INVALID_ARGUMENT, "cpu: copy: unknown direction " + std::to_string(direction));
    }
    if (size == 0 || dst == src) return;
    if (dst == nullptr || src == nullptr) fail(DX_INVALID_ARGUMENT, "cpu: copy: null pointer");
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
    const bool overlap = d < s + size && s < d + size;
    if (overlap) {
      std::memmove(d, s, static_cast<size_t>(size));
      return;
    }
    split_bytes(size, [d, s](uint64_t begin, uint64_t end) {
      std::memcpy(d + begin, s + begin, static_cast<size_t>(end - begin));
    });
  });
}

template <class R>
void fill_pattern(char* dst, uint64_t begin, uint64_t end, R value) {
  // `begin` is a multiple of the pattern size, so the phase of the pattern is preserved.
  for (uint64_t i = begin; i < end; i += sizeof(R)) std::memcpy(dst + i, &value, sizeof(R));
}

dx_error_t* space_fill(void* space_data, void* dst, uint64_t size, const void* pattern,
                       uint32_t pattern_size, dx_stream_t) {
  return guard(host_of(space_data), [&] {
    if (pattern_size != 1 && pattern_size != 2 && pattern_size != 4 && pattern_size != 8) {
      fail(DX_INVALID_ARGUMENT, "cpu: fill: pattern size must be 1, 2, 4 or 8");
    }
    if (size % pattern_size != 0) {
      fail(DX_INVALID_ARGUMENT, "cpu: fill: size is not a multiple of the pattern size");
    }
    if (size == 0) return;
    if (dst == nullptr || pattern == nullptr) fail(DX_INVALID_ARGUMENT, "cpu: fill: null pointer");
    auto* d = static_cast<char*>(dst);
    uint64_t bits = 0;
    std::memcpy(&bits, pattern, pattern_size);
    split_bytes(size, [=](uint64_t begin, uint64_t end) {
      switch (pattern_size) {
        case 1: std::memset(d + begin, static_cast<int>(bits & 0xff), end - begin); break;
        case 2: fill_pattern(d, begin, end, static_cast<uint16_t>(bits)); break;
        case 4: fill_pattern(d, begin, end, static_cast<uint32_t>(bits)); break;
        default: fill_pattern(d, begin, end, bits); break;
      }
    });
  });
}

dx_error_t* space_stats(void* space_data, dx_memory_stats_t* out) {
  return guard(host_of(space_data), [&] {
    if (out == nullptr) fail(DX_INVALID_ARGUMENT, "cpu: stats: out_stats is null");
    if (out->struct_size < sizeof(size_t)) fail(DX_INVALID_ARGUMENT, "cpu: stats: struct_size unset");
    const auto* state = static_cast<const PluginState*>(space_data);
    dx_memory_stats_t full{};
    full.in_use_bytes = state->in_use_bytes.load(std::memory_order_relaxed);
    full.peak_in_use_bytes = state->peak_in_use_bytes.load(std::memory_order_relaxed);
    full.live_allocations = state->live_allocations.load(std::memory_order_relaxed);
    // Freed blocks go back to the C library at once: nothing is reserved beyond what is in use,
    // so reserved_bytes and its peak stay 0.
    const size_t known = DX_MEMORY_STATS_SIZE_1_0;
    std::memcpy(reinterpret_cast<char*>(out) + sizeof(size_t),
                reinterpret_cast<const char*>(&full) + sizeof(size_t),
                std::min(known, out->struct_size) - sizeof(size_t));
  });
}

}  // namespace

dx_error_t* register_memory_space(const dx_host_t* host, dx_host_context_t* context,
                                  void* space_data) {
  dx_memory_space_desc_t desc{};
  desc.struct_size = DX_MEMORY_SPACE_DESC_SIZE_1_0;
  desc.name = "cpu";
  desc.device = DLDevice{kDLCPU, 0};
  desc.kind = DX_MEMORY_HOST;
  desc.capacity = 0;
  desc.alignment = kAlignment;
  desc.space_data = space_data;
  desc.alloc = &space_alloc;
  desc.free = &space_free;
  desc.copy = &space_copy;
  desc.fill = &space_fill;
  desc.stats = &space_stats;
  return host->register_memory_space(context, &desc);
}

}  // namespace deepx::cpu
