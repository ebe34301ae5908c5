// A host-memory stand-in for the slice of the CUDA/HIP runtime the plugins use, so that the
// very same plugin sources build with g++ into `libdeepx-plugin-gpuemu.so` (tests only, never
// installed): "device" memory is host memory, every stream is synchronous, kernels run through
// the grid emulation in src/launch.h. With it the whole plugin (validation, layouts, dispatch,
// memory slots, every kernel body) runs and is certified against the reference on machines
// without a GPU. What it cannot check: the real runtime's behaviour, warp scheduling, shared
// memory races, the compilers' device math and cuBLAS. Included by portability.h when
// DEEPX_GPU_EMULATED_RUNTIME is defined.
#ifndef DEEPX_GPU_EMULATED_RUNTIME_H_
#define DEEPX_GPU_EMULATED_RUNTIME_H_

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <cstddef>

namespace deepx::gpu::emu {

enum Error : int {
  kSuccess = 0,
  kErrorMemoryAllocation = 2,
  kErrorInvalidValue = 1,
  kErrorNoDevice = 100,
  kErrorInsufficientDriver = 35,
  kErrorNotSupported = 801,
};

struct Stream {
  int device;
};
struct Event {
  int unused;
};
struct Pool {
  std::atomic<uint64_t> used{0}, used_high{0};
};
struct IpcMemHandle {
  char reserved[64];
};
struct PoolProps {
  int allocType;
  int handleTypes;
  struct {
    int type;
    int id;
  } location;
};

/// Header in front of every emulated device allocation (records the size for the statistics).
struct Block {
  uint64_t size;
  Pool* pool;
  uint64_t pad[30];  // keeps the payload 256-byte aligned, like cudaMalloc
};

inline thread_local int current_device = 0;

inline int device_count() {
  const char* v = getenv("DEEPX_GPUEMU_DEVICES");
  return v != nullptr ? atoi(v) : 1;
}

inline Error alloc_block(void** ptr, size_t size, Pool* pool) {
  if (size > (uint64_t{1} << 40)) return kErrorMemoryAllocation;  // emulate a finite device
  static_assert(sizeof(Block) == 256);
  void* raw = aligned_alloc(256, sizeof(Block) + ((size + 255) / 256) * 256);
  if (raw == nullptr) return kErrorMemoryAllocation;
  auto* b = static_cast<Block*>(raw);
  b->size = size;
  b->pool = pool;
  if (pool != nullptr) {
    const uint64_t used = pool->used += size;
    uint64_t high = pool->used_high.load();
    while (used > high && !pool->used_high.compare_exchange_weak(high, used)) {
    }
  }
  *ptr = b + 1;
  return kSuccess;
}

inline Error free_block(void* ptr) {
  if (ptr == nullptr) return kSuccess;
  Block* b = static_cast<Block*>(ptr) - 1;
  if (b->pool != nullptr) b->pool->used -= b->size;
  free(b);
  return kSuccess;
}

}  // namespace deepx::gpu::emu

#define DXG_BACKEND_NAME "gpuemu"
using gpuError_t = deepx::gpu::emu::Error;
using gpuStream_t = deepx::gpu::emu::Stream*;
using gpuEvent_t = deepx::gpu::emu::Event*;
using gpuMemPool_t = deepx::gpu::emu::Pool*;
using gpuMemPoolProps = deepx::gpu::emu::PoolProps;
using gpuIpcMemHandle_t = deepx::gpu::emu::IpcMemHandle;
#define gpuSuccess deepx::gpu::emu::kSuccess
#define gpuErrorNoDevice deepx::gpu::emu::kErrorNoDevice
#define gpuErrorInsufficientDriver deepx::gpu::emu::kErrorInsufficientDriver
#define gpuErrorMemoryAllocation deepx::gpu::emu::kErrorMemoryAllocation
#define gpuStreamNonBlocking 1
#define gpuEventDisableTiming 2
#define gpuHostAllocPortable 1
#define gpuIpcMemLazyEnablePeerAccess 1
#define gpuMemAllocationTypePinned 1
#define gpuMemHandleTypeNone 0
#define gpuMemLocationTypeDevice 1
#define gpuDevAttrMemoryPoolsSupported 1
#define gpuMemcpyHostToDevice 1
#define gpuMemcpyDeviceToHost 2
#define gpuMemcpyDeviceToDevice 3
#define gpuMemcpyDefault 4
enum gpuEmuPoolAttr {
  gpuMemPoolAttrReleaseThreshold,
  gpuMemPoolAttrReservedMemCurrent,
  gpuMemPoolAttrReservedMemHigh,
  gpuMemPoolAttrUsedMemCurrent,
  gpuMemPoolAttrUsedMemHigh
};

inline const char* gpuGetErrorString(gpuError_t e) {
  switch (e) {
    case gpuSuccess: return "no error";
    case gpuErrorMemoryAllocation: return "out of memory";
    case gpuErrorNoDevice: return "no device";
    case deepx::gpu::emu::kErrorNotSupported: return "operation not supported by the emulator";
    default: return "invalid value";
  }
}
inline const char* gpuGetErrorName(gpuError_t e) {
  return e == gpuSuccess ? "gpuSuccess" : "gpuEmuError";
}
inline gpuError_t gpuGetLastError() { return gpuSuccess; }
inline gpuError_t gpuGetDeviceCount(int* n) {
  *n = deepx::gpu::emu::device_count();
  return *n > 0 ? gpuSuccess : gpuErrorNoDevice;
}
inline gpuError_t gpuGetDevice(int* d) {
  *d = deepx::gpu::emu::current_device;
  return gpuSuccess;
}
inline gpuError_t gpuSetDevice(int d) {
  if (d < 0 || d >= deepx::gpu::emu::device_count()) return deepx::gpu::emu::kErrorInvalidValue;
  deepx::gpu::emu::current_device = d;
  return gpuSuccess;
}
inline gpuError_t gpuDeviceGetAttribute(int* value, int, int) {
  *value = 1;
  return gpuSuccess;
}
inline gpuError_t gpuMemGetInfo(size_t* free_bytes, size_t* total) {
  *free_bytes = *total = size_t{1} << 34;
  return gpuSuccess;
}
inline gpuError_t gpuStreamCreateWithFlags(gpuStream_t* s, unsigned) {
  *s = new deepx::gpu::emu::Stream{deepx::gpu::emu::current_device};
  return gpuSuccess;
}
inline gpuError_t gpuStreamDestroy(gpuStream_t s) {
  delete s;
  return gpuSuccess;
}
inline gpuError_t gpuStreamSynchronize(gpuStream_t) { return gpuSuccess; }
inline gpuError_t gpuStreamWaitEvent(gpuStream_t, gpuEvent_t, unsigned) { return gpuSuccess; }
inline gpuError_t gpuEventCreateWithFlags(gpuEvent_t* e, unsigned) {
  *e = new deepx::gpu::emu::Event{0};
  return gpuSuccess;
}
inline gpuError_t gpuEventDestroy(gpuEvent_t e) {
  delete e;
  return gpuSuccess;
}
inline gpuError_t gpuEventRecord(gpuEvent_t, gpuStream_t) { return gpuSuccess; }
inline gpuError_t gpuEventSynchronize(gpuEvent_t) { return gpuSuccess; }
inline gpuError_t gpuMemPoolCreate(gpuMemPool_t* p, const gpuMemPoolProps*) {
  *p = new deepx::gpu::emu::Pool();
  return gpuSuccess;
}
inline gpuError_t gpuMemPoolDestroy(gpuMemPool_t p) {
  delete p;
  return gpuSuccess;
}
inline gpuError_t gpuMemPoolSetAttribute(gpuMemPool_t, int, void*) { return gpuSuccess; }
inline gpuError_t gpuMemPoolGetAttribute(gpuMemPool_t p, int attr, void* value) {
  uint64_t v = 0;
  switch (attr) {
    case gpuMemPoolAttrReservedMemCurrent: case gpuMemPoolAttrUsedMemCurrent: v = p->used; break;
    case gpuMemPoolAttrReservedMemHigh: case gpuMemPoolAttrUsedMemHigh: v = p->used_high; break;
    default: break;
  }
  memcpy(value, &v, sizeof v);
  return gpuSuccess;
}
inline gpuError_t gpuMallocFromPoolAsync(void** ptr, size_t size, gpuMemPool_t pool, gpuStream_t) {
  return deepx::gpu::emu::alloc_block(ptr, size, pool);
}
inline gpuError_t gpuFreeAsync(void* ptr, gpuStream_t) { return deepx::gpu::emu::free_block(ptr); }
inline gpuError_t gpuMalloc(void** ptr, size_t size) {
  return deepx::gpu::emu::alloc_block(ptr, size, nullptr);
}
inline gpuError_t gpuFree(void* ptr) { return deepx::gpu::emu::free_block(ptr); }
inline gpuError_t gpuHostAlloc(void** ptr, size_t size, unsigned) {
  return deepx::gpu::emu::alloc_block(ptr, size, nullptr);
}
inline gpuError_t gpuFreeHost(void* ptr) { return deepx::gpu::emu::free_block(ptr); }
inline gpuError_t gpuMemcpyAsync(void* dst, const void* src, size_t size, int, gpuStream_t) {
  memmove(dst, src, size);
  return gpuSuccess;
}
inline gpuError_t gpuMemsetAsync(void* dst, int value, size_t size, gpuStream_t) {
  memset(dst, value, size);
  return gpuSuccess;
}
inline gpuError_t gpuIpcGetMemHandle(gpuIpcMemHandle_t*, void*) {
  return deepx::gpu::emu::kErrorNotSupported;
}
inline gpuError_t gpuIpcOpenMemHandle(void**, gpuIpcMemHandle_t, unsigned) {
  return deepx::gpu::emu::kErrorNotSupported;
}
inline gpuError_t gpuIpcCloseMemHandle(void*) { return deepx::gpu::emu::kErrorNotSupported; }

#endif  // DEEPX_GPU_EMULATED_RUNTIME_H_
