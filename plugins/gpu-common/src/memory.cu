// Memory spaces of the GPU plugins: one per visible GPU ("cuda:0", ...; device kDLCUDA or
// kDLROCM) and one for pinned host memory ("cuda_host"; kDLCUDAHost or kDLROCMHost).
//
// Device memory comes from a per-device stream-ordered pool (cudaMallocFromPoolAsync /
// hipMallocFromPoolAsync) whose release threshold is "never", so freed blocks are reused
// without returning to the driver. A null stream means "synchronous": the slot enqueues on the
// device's own stream and waits. Streams are non-blocking streams of the space's device, events
// are timing-free events. IPC exports a cudaIpcMemHandle_t / hipIpcMemHandle_t, which the CUDA
// and HIP runtimes only allow for allocations made with cudaMalloc / hipMalloc: set
// DEEPX_GPU_ALLOCATOR=device to allocate that way (synchronously) when tensors must be shared
// across processes; exporting a pool allocation is DX_UNSUPPORTED with that advice.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "launch.h"
#include "runtime.h"

namespace deepx::gpu {
namespace {

constexpr uint64_t kDeviceAlignment = 256;  // cudaMalloc and the pools align to at least 256
constexpr uint64_t kPinnedAlignment = 64;
constexpr uint32_t kIpcMagic = 0x44584749;  // "DXGI"
constexpr uint32_t kIpcVersion = 1;

/// The opaque IPC handle: what another process needs to map the allocation.
struct IpcHandle {
  uint32_t magic;
  uint32_t version;
  int32_t device;
  int32_t pid;
  uint64_t size;
  gpuIpcMemHandle_t handle;
};

SpaceData& space_of(void* space_data) { return *static_cast<SpaceData*>(space_data); }
const dx_host_t* host_of(void* space_data) { return space_of(space_data).state->host; }

gpuStream_t stream_or_sync(const SpaceData& s, dx_stream_t stream) {
  return stream != nullptr ? reinterpret_cast<gpuStream_t>(stream) : s.device->sync_stream;
}

void finish(const SpaceData& s, dx_stream_t stream, const char* what) {
  check(gpuGetLastError(), what);
  if (stream == nullptr) check(gpuStreamSynchronize(s.device->sync_stream), what);
}

// ---- device spaces -------------------------------------------------------------------------

dx_error_t* device_alloc(void* space_data, uint64_t size, dx_stream_t stream, void** out_ptr) {
  return guard(host_of(space_data), [&] {
    if (out_ptr == nullptr) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": alloc: out_ptr is null");
    if (size == 0) {
      *out_ptr = nullptr;
      return;
    }
    SpaceData& s = space_of(space_data);
    DeviceGuard device(s.device->index);
    void* p = nullptr;
    gpuError_t status;
    if (s.state->use_pool && s.device->pools_supported) {
      status = gpuMallocFromPoolAsync(&p, size, s.device->pool, stream_or_sync(s, stream));
      if (status == gpuSuccess && stream == nullptr) {
        status = gpuStreamSynchronize(s.device->sync_stream);
      }
    } else {
      status = gpuMalloc(&p, size);
    }
    if (status != gpuSuccess) {
      (void)gpuGetLastError();
      fail(DX_OUT_OF_MEMORY, std::string(DXG_BACKEND_NAME ": cannot allocate ") + std::to_string(size) +
                                 " bytes on " + s.device->space_name + ": " + gpuGetErrorString(status));
    }
    {
      std::lock_guard<std::mutex> lock(s.device->stats_mutex);
      ++s.device->live_allocations;
      if (!(s.state->use_pool && s.device->pools_supported)) {
        s.device->live_sizes[p] = size;
        s.device->in_use_bytes += size;
        s.device->peak_in_use_bytes = std::max(s.device->peak_in_use_bytes, s.device->in_use_bytes);
      }
    }
    *out_ptr = p;
  });
}

dx_error_t* device_free(void* space_data, void* ptr, dx_stream_t stream) {
  return guard(host_of(space_data), [&] {
    if (ptr == nullptr) return;
    SpaceData& s = space_of(space_data);
    DeviceGuard device(s.device->index);
    if (s.state->use_pool && s.device->pools_supported) {
      check(gpuFreeAsync(ptr, stream_or_sync(s, stream)), "free");
      finish(s, stream, "free");
    } else {
      check(gpuFree(ptr), "free");
    }
    std::lock_guard<std::mutex> lock(s.device->stats_mutex);
    if (s.device->live_allocations > 0) --s.device->live_allocations;
    auto it = s.device->live_sizes.find(ptr);
    if (it != s.device->live_sizes.end()) {
      s.device->in_use_bytes -= it->second;
      s.device->live_sizes.erase(it);
    }
  });
}

dx_error_t* device_stats(void* space_data, dx_memory_stats_t* out) {
  return guard(host_of(space_data), [&] {
    if (out == nullptr) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": stats: out_stats is null");
    if (out->struct_size < sizeof(size_t)) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": stats: struct_size unset");
    }
    SpaceData& s = space_of(space_data);
    dx_memory_stats_t full{};
    if (s.state->use_pool && s.device->pools_supported) {
      DeviceGuard device(s.device->index);
      const PoolStats p = pool_stats(*s.device);
      full.in_use_bytes = p.used;
      full.peak_in_use_bytes = p.used_high;
      full.reserved_bytes = p.reserved;
      full.peak_reserved_bytes = p.reserved_high;
    }
    {
      std::lock_guard<std::mutex> lock(s.device->stats_mutex);
      full.live_allocations = s.device->live_allocations;
      if (!(s.state->use_pool && s.device->pools_supported)) {
        full.in_use_bytes = s.device->in_use_bytes;
        full.peak_in_use_bytes = s.device->peak_in_use_bytes;
      }
    }
    const size_t known = DX_MEMORY_STATS_SIZE_1_0;
    std::memcpy(reinterpret_cast<char*>(out) + sizeof(size_t),
                reinterpret_cast<const char*>(&full) + sizeof(size_t),
                std::min(known, out->struct_size) - sizeof(size_t));
  });
}

dx_error_t* device_copy(void* space_data, void* dst, const void* src, uint64_t size,
                        int32_t direction, dx_stream_t stream) {
  return guard(host_of(space_data), [&] {
    if (direction < DX_COPY_HOST_TO_DEVICE || direction > DX_COPY_DEVICE_TO_DEVICE) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": copy: unknown direction " + std::to_string(direction));
    }
    if (size == 0) return;
    if (dst == nullptr || src == nullptr) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": copy: null pointer");
    SpaceData& s = space_of(space_data);
    DeviceGuard device(s.device->index);
    // Unified addressing: the runtime tells pageable, pinned and device memory apart itself.
    check(gpuMemcpyAsync(dst, src, size, gpuMemcpyDefault, stream_or_sync(s, stream)), "copy");
    finish(s, stream, "copy");
  });
}

dx_error_t* device_fill(void* space_data, void* dst, uint64_t size, const void* pattern,
                        uint32_t pattern_size, dx_stream_t stream) {
  return guard(host_of(space_data), [&] {
    if (pattern_size != 1 && pattern_size != 2 && pattern_size != 4 && pattern_size != 8) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": fill: pattern size must be 1, 2, 4 or 8");
    }
    if (size % pattern_size != 0) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": fill: size is not a multiple of the pattern size");
    }
    if (size == 0) return;
    if (dst == nullptr || pattern == nullptr) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": fill: null pointer");
    SpaceData& s = space_of(space_data);
    DeviceGuard device(s.device->index);
    const gpuStream_t st = stream_or_sync(s, stream);
    uint64_t bits = 0;
    std::memcpy(&bits, pattern, pattern_size);
    const int64_t count = static_cast<int64_t>(size / pattern_size);
    Layout flat;
    flat.rank = 1;
    flat.operands = 1;
    flat.count = count;
    flat.shape[0] = count;
    flat.strides[0][0] = 1;
    switch (pattern_size) {
      case 1: check(gpuMemsetAsync(dst, static_cast<int>(bits & 0xff), size, st), "fill"); break;
      case 2: launch_for_each(st, FillFn<uint16_t>{flat, static_cast<uint16_t*>(dst), static_cast<uint16_t>(bits)}, count); break;
      case 4: launch_for_each(st, FillFn<uint32_t>{flat, static_cast<uint32_t*>(dst), static_cast<uint32_t>(bits)}, count); break;
      default: launch_for_each(st, FillFn<uint64_t>{flat, static_cast<uint64_t*>(dst), bits}, count); break;
    }
    finish(s, stream, "fill");
  });
}

dx_error_t* device_stream_create(void* space_data, dx_stream_t* out_stream) {
  return guard(host_of(space_data), [&] {
    if (out_stream == nullptr) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": stream_create: null out");
    SpaceData& s = space_of(space_data);
    DeviceGuard device(s.device->index);
    gpuStream_t stream = nullptr;
    check(gpuStreamCreateWithFlags(&stream, gpuStreamNonBlocking), "stream create");
    *out_stream = reinterpret_cast<dx_stream_t>(stream);
  });
}

dx_error_t* device_stream_destroy(void* space_data, dx_stream_t stream) {
  return guard(host_of(space_data), [&] {
    if (stream == nullptr) return;
    SpaceData& s = space_of(space_data);
    DeviceGuard device(s.device->index);
    // Destroying a stream with pending work is legal: the runtime releases it once drained.
    check(gpuStreamDestroy(reinterpret_cast<gpuStream_t>(stream)), "stream destroy");
  });
}

dx_error_t* device_stream_synchronize(void* space_data, dx_stream_t stream) {
  return guard(host_of(space_data), [&] {
    SpaceData& s = space_of(space_data);
    DeviceGuard device(s.device->index);
    check(gpuStreamSynchronize(stream_or_sync(s, stream)), "stream synchronize");
  });
}

dx_error_t* device_event_create(void* space_data, dx_event_t* out_event) {
  return guard(host_of(space_data), [&] {
    if (out_event == nullptr) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": event_create: null out");
    SpaceData& s = space_of(space_data);
    DeviceGuard device(s.device->index);
    gpuEvent_t event = nullptr;
    check(gpuEventCreateWithFlags(&event, gpuEventDisableTiming), "event create");
    *out_event = reinterpret_cast<dx_event_t>(event);
  });
}

dx_error_t* device_event_destroy(void* space_data, dx_event_t event) {
  return guard(host_of(space_data), [&] {
    if (event == nullptr) return;
    SpaceData& s = space_of(space_data);
    DeviceGuard device(s.device->index);
    check(gpuEventDestroy(reinterpret_cast<gpuEvent_t>(event)), "event destroy");
  });
}

dx_error_t* device_event_record(void* space_data, dx_event_t event, dx_stream_t stream) {
  return guard(host_of(space_data), [&] {
    if (event == nullptr) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": event_record: null event");
    SpaceData& s = space_of(space_data);
    DeviceGuard device(s.device->index);
    check(gpuEventRecord(reinterpret_cast<gpuEvent_t>(event), stream_or_sync(s, stream)), "event record");
  });
}

dx_error_t* device_stream_wait_event(void* space_data, dx_stream_t stream, dx_event_t event) {
  return guard(host_of(space_data), [&] {
    if (event == nullptr) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": stream_wait_event: null event");
    SpaceData& s = space_of(space_data);
    DeviceGuard device(s.device->index);
    check(gpuStreamWaitEvent(stream_or_sync(s, stream), reinterpret_cast<gpuEvent_t>(event), 0),
          "stream wait event");
  });
}

dx_error_t* device_event_synchronize(void* space_data, dx_event_t event) {
  return guard(host_of(space_data), [&] {
    if (event == nullptr) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": event_synchronize: null event");
    check(gpuEventSynchronize(reinterpret_cast<gpuEvent_t>(event)), "event synchronize");
  });
}

dx_error_t* device_ipc_export(void* space_data, void* ptr, uint64_t size, void* out_handle,
                              uint64_t capacity, uint64_t* out_size) {
  return guard(host_of(space_data), [&] {
    if (ptr == nullptr || out_size == nullptr) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": ipc_export: null argument");
    *out_size = sizeof(IpcHandle);
    if (out_handle == nullptr || capacity < sizeof(IpcHandle)) {
      fail(DX_OUT_OF_RANGE, DXG_BACKEND_NAME ": ipc_export: the handle needs " +
                                std::to_string(sizeof(IpcHandle)) + " bytes");
    }
    SpaceData& s = space_of(space_data);
    DeviceGuard device(s.device->index);
    IpcHandle h{};
    h.magic = kIpcMagic;
    h.version = kIpcVersion;
    h.device = s.device->index;
    h.pid = static_cast<int32_t>(getpid());
    h.size = size;
    const gpuError_t status = gpuIpcGetMemHandle(&h.handle, ptr);
    if (status != gpuSuccess) {
      (void)gpuGetLastError();
      fail(s.state->use_pool ? DX_UNSUPPORTED : DX_INTERNAL,
           std::string(DXG_BACKEND_NAME ": ipc_export: ") + gpuGetErrorString(status) +
               (s.state->use_pool ? " (allocations from the stream-ordered pool cannot be "
                                    "exported; set DEEPX_GPU_ALLOCATOR=device in the exporting "
                                    "process)"
                                  : " (the pointer must be the start of an allocation)"));
    }
    std::memcpy(out_handle, &h, sizeof h);
  });
}

dx_error_t* device_ipc_import(void* space_data, const void* handle, uint64_t handle_size,
                              void** out_ptr, uint64_t* out_size) {
  return guard(host_of(space_data), [&] {
    if (handle == nullptr || out_ptr == nullptr) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": ipc_import: null argument");
    IpcHandle h{};
    if (handle_size != sizeof h) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": ipc_import: wrong handle size");
    std::memcpy(&h, handle, sizeof h);
    if (h.magic != kIpcMagic || h.version != kIpcVersion) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": ipc_import: not a deepx " DXG_BACKEND_NAME " IPC handle");
    }
    SpaceData& s = space_of(space_data);
    if (h.device != s.device->index) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": ipc_import: the handle is for device " +
                                    std::to_string(h.device) + ", this space is " + s.device->space_name);
    }
    DeviceGuard device(s.device->index);
    void* p = nullptr;
    check(gpuIpcOpenMemHandle(&p, h.handle, gpuIpcMemLazyEnablePeerAccess), "ipc_import");
    *out_ptr = p;
    if (out_size != nullptr) *out_size = h.size;
  });
}

dx_error_t* device_ipc_close(void* space_data, void* ptr) {
  return guard(host_of(space_data), [&] {
    if (ptr == nullptr) return;
    SpaceData& s = space_of(space_data);
    DeviceGuard device(s.device->index);
    check(gpuIpcCloseMemHandle(ptr), "ipc_close");
  });
}

// ---- pinned host space ---------------------------------------------------------------------

dx_error_t* pinned_alloc(void* space_data, uint64_t size, dx_stream_t, void** out_ptr) {
  return guard(host_of(space_data), [&] {
    if (out_ptr == nullptr) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": alloc: out_ptr is null");
    if (size == 0) {
      *out_ptr = nullptr;
      return;
    }
    void* p = nullptr;
    const gpuError_t status = gpuHostAlloc(&p, size, gpuHostAllocPortable);
    if (status != gpuSuccess) {
      (void)gpuGetLastError();
      fail(DX_OUT_OF_MEMORY, std::string(DXG_BACKEND_NAME ": cannot pin ") + std::to_string(size) +
                                 " bytes: " + gpuGetErrorString(status));
    }
    *out_ptr = p;
  });
}

dx_error_t* pinned_free(void* space_data, void* ptr, dx_stream_t) {
  return guard(host_of(space_data), [&] {
    if (ptr != nullptr) check(gpuFreeHost(ptr), "free pinned");
  });
}

dx_error_t* pinned_copy(void* space_data, void* dst, const void* src, uint64_t size,
                        int32_t direction, dx_stream_t) {
  return guard(host_of(space_data), [&] {
    if (direction < DX_COPY_HOST_TO_DEVICE || direction > DX_COPY_DEVICE_TO_DEVICE) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": copy: unknown direction");
    }
    if (size == 0 || dst == src) return;
    if (dst == nullptr || src == nullptr) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": copy: null pointer");
    std::memmove(dst, src, static_cast<size_t>(size));  // both sides are host memory
  });
}

dx_error_t* pinned_fill(void* space_data, void* dst, uint64_t size, const void* pattern,
                        uint32_t pattern_size, dx_stream_t) {
  return guard(host_of(space_data), [&] {
    if ((pattern_size != 1 && pattern_size != 2 && pattern_size != 4 && pattern_size != 8) ||
        size % pattern_size != 0) {
      fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": fill: bad pattern size");
    }
    if (size == 0) return;
    if (dst == nullptr || pattern == nullptr) fail(DX_INVALID_ARGUMENT, DXG_BACKEND_NAME ": fill: null pointer");
    auto* d = static_cast<char*>(dst);
    for (uint64_t i = 0; i < size; i += pattern_size) std::memcpy(d + i, pattern, pattern_size);
  });
}

}  // namespace

dx_error_t* register_memory_spaces(PluginState* state) {
  const dx_host_t* host = state->host;
  for (auto& device : state->devices) {
    auto data = std::make_unique<SpaceData>();
    data->state = state;
    data->device = device.get();
    dx_memory_space_desc_t desc{};
    desc.struct_size = DX_MEMORY_SPACE_DESC_SIZE_1_0;
    desc.name = device->space_name.c_str();
    desc.device = DLDevice{static_cast<DLDeviceType>(kDeviceType), device->index};
    // Device kind in the emulated build too: the host then reaches this memory only through
    // the copy slot, as on a real GPU (strided reads and writes included).
    desc.kind = DX_MEMORY_DEVICE;
    desc.capacity = device->capacity;
    desc.alignment = kDeviceAlignment;
    desc.space_data = data.get();
    desc.alloc = &device_alloc;
    desc.free = &device_free;
    desc.copy = &device_copy;
    desc.fill = &device_fill;
    desc.stream_create = &device_stream_create;
    desc.stream_destroy = &device_stream_destroy;
    desc.stream_synchronize = &device_stream_synchronize;
    desc.event_create = &device_event_create;
    desc.event_destroy = &device_event_destroy;
    desc.event_record = &device_event_record;
    desc.stream_wait_event = &device_stream_wait_event;
    desc.event_synchronize = &device_event_synchronize;
    desc.ipc_export = &device_ipc_export;
    desc.ipc_import = &device_ipc_import;
    desc.ipc_close = &device_ipc_close;
    desc.stats = &device_stats;
    state->spaces.push_back(std::move(data));
    if (dx_error_t* e = host->register_memory_space(state->context, &desc)) return e;
  }
  if (state->devices.empty()) return nullptr;
  auto data = std::make_unique<SpaceData>();
  data->state = state;
  dx_memory_space_desc_t desc{};
  desc.struct_size = DX_MEMORY_SPACE_DESC_SIZE_1_0;
  desc.name = state->pinned_name.c_str();
  desc.device = DLDevice{static_cast<DLDeviceType>(kPinnedDeviceType), 0};
  desc.kind = DX_MEMORY_PINNED;
  desc.alignment = kPinnedAlignment;
  desc.space_data = data.get();
  desc.alloc = &pinned_alloc;
  desc.free = &pinned_free;
  desc.copy = &pinned_copy;
  desc.fill = &pinned_fill;
  state->spaces.push_back(std::move(data));
  return host->register_memory_space(state->context, &desc);
}

PoolStats pool_stats(const DeviceState& d) {
  PoolStats s;
  if (d.pool == nullptr) return s;
  (void)gpuMemPoolGetAttribute(d.pool, gpuMemPoolAttrReservedMemCurrent, &s.reserved);
  (void)gpuMemPoolGetAttribute(d.pool, gpuMemPoolAttrReservedMemHigh, &s.reserved_high);
  (void)gpuMemPoolGetAttribute(d.pool, gpuMemPoolAttrUsedMemCurrent, &s.used);
  (void)gpuMemPoolGetAttribute(d.pool, gpuMemPoolAttrUsedMemHigh, &s.used_high);
  return s;
}

void release_devices(PluginState* state) {
  for (auto& d : state->devices) {
    if (d->pool != nullptr) {
      const PoolStats s = pool_stats(*d);
      state->log(DX_LOG_DEBUG, d->space_name + " pool: reserved " + std::to_string(s.reserved) +
                                   " B (high " + std::to_string(s.reserved_high) + "), used " +
                                   std::to_string(s.used) + " B (high " +
                                   std::to_string(s.used_high) + ")");
    }
    (void)gpuSetDevice(d->index);
    release_blas(*d);
    if (d->sync_stream != nullptr) (void)gpuStreamSynchronize(d->sync_stream);
    if (d->sync_stream != nullptr) (void)gpuStreamDestroy(d->sync_stream);
    if (d->pool != nullptr) (void)gpuMemPoolDestroy(d->pool);
  }
  state->devices.clear();
}

}  // namespace deepx::gpu
