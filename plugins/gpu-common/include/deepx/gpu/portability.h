// The one place where CUDA and HIP differ by name. Every GPU source of deepx includes this
// header and spells the runtime API `gpuXxx`; nvcc maps it to `cudaXxx`, hipcc to `hipXxx`.
//
// A third mode, host emulation, is what a plain C++ compiler (g++, no GPU toolkit) sees: the
// execution-space keywords vanish, so the per-element and per-tile bodies of the kernels
// (every `DXG_HD` function in this folder) compile as ordinary host code and the unit tests run
// them through a small grid emulator. No runtime API is available in that mode.
//
// Rules for portable kernel code (checked by compiling every kernel with both compilers):
// - no CUDA-only intrinsics without a HIP spelling here (warp shuffles, __ldg, inline PTX);
// - block-level cooperation only through __shared__ arrays and __syncthreads();
// - device math through the C functions (expf, exp, ...), which both toolchains provide.
#ifndef DEEPX_GPU_PORTABILITY_H_
#define DEEPX_GPU_PORTABILITY_H_

#if defined(__HIPCC__) || defined(DEEPX_GPU_FORCE_HIP)
#define DXG_BACKEND_HIP 1
#include <hip/hip_runtime.h>
#elif defined(__CUDACC__)
#define DXG_BACKEND_CUDA 1
#include <cuda_runtime.h>
#else
#define DXG_HOST_EMULATION 1
#endif

#if defined(DXG_HOST_EMULATION) && defined(DEEPX_GPU_EMULATED_RUNTIME)
// The whole plugin built with g++ against a host-memory runtime (tests only).
#include "deepx/gpu/emulated_runtime.h"
#endif

#if defined(DXG_HOST_EMULATION)
// Plain C++: the kernel bodies become host functions.
#ifndef __host__
#define __host__
#endif
#ifndef __device__
#define __device__
#endif
#ifndef __global__
#define __global__
#endif
#ifndef __forceinline__
#define __forceinline__ inline
#endif
#endif

/// Marks a function callable on the host and on the device (and in host emulation).
#define DXG_HD __host__ __device__ __forceinline__

/// True while compiling device code (the bodies may then use device-only builtins).
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
#define DXG_DEVICE_PASS 1
#endif

#if defined(DXG_BACKEND_CUDA)
#define DXG_BACKEND_NAME "cuda"
using gpuError_t = cudaError_t;
using gpuStream_t = cudaStream_t;
using gpuEvent_t = cudaEvent_t;
using gpuMemPool_t = cudaMemPool_t;
using gpuMemPoolProps = cudaMemPoolProps;
using gpuIpcMemHandle_t = cudaIpcMemHandle_t;
using gpuDeviceProp_t = cudaDeviceProp;
#define gpuSuccess cudaSuccess
#define gpuErrorNoDevice cudaErrorNoDevice
#define gpuErrorInsufficientDriver cudaErrorInsufficientDriver
#define gpuErrorMemoryAllocation cudaErrorMemoryAllocation
#define gpuGetErrorString cudaGetErrorString
#define gpuGetErrorName cudaGetErrorName
#define gpuGetLastError cudaGetLastError
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuGetDevice cudaGetDevice
#define gpuSetDevice cudaSetDevice
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuDeviceGetAttribute cudaDeviceGetAttribute
#define gpuDevAttrMemoryPoolsSupported cudaDevAttrMemoryPoolsSupported
#define gpuMemGetInfo cudaMemGetInfo
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMallocAsync cudaMallocAsync
#define gpuFreeAsync cudaFreeAsync
#define gpuMallocFromPoolAsync cudaMallocFromPoolAsync
#define gpuHostAlloc cudaHostAlloc
#define gpuHostAllocDefault cudaHostAllocDefault
#define gpuHostAllocPortable cudaHostAllocPortable
#define gpuFreeHost cudaFreeHost
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuMemcpyDefault cudaMemcpyDefault
#define gpuMemsetAsync cudaMemsetAsync
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamNonBlocking cudaStreamNonBlocking
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuStreamWaitEvent cudaStreamWaitEvent
#define gpuEventCreateWithFlags cudaEventCreateWithFlags
#define gpuEventDisableTiming cudaEventDisableTiming
#define gpuEventInterprocess cudaEventInterprocess
#define gpuEventDestroy cudaEventDestroy
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuDeviceGetDefaultMemPool cudaDeviceGetDefaultMemPool
#define gpuMemPoolSetAttribute cudaMemPoolSetAttribute
#define gpuMemPoolGetAttribute cudaMemPoolGetAttribute
#define gpuMemPoolAttrReleaseThreshold cudaMemPoolAttrReleaseThreshold
#define gpuMemPoolAttrReservedMemCurrent cudaMemPoolAttrReservedMemCurrent
#define gpuMemPoolAttrReservedMemHigh cudaMemPoolAttrReservedMemHigh
#define gpuMemPoolAttrUsedMemCurrent cudaMemPoolAttrUsedMemCurrent
#define gpuMemPoolAttrUsedMemHigh cudaMemPoolAttrUsedMemHigh
#define gpuMemPoolTrimTo cudaMemPoolTrimTo
#define gpuMemPoolCreate cudaMemPoolCreate
#define gpuMemPoolDestroy cudaMemPoolDestroy
#define gpuMemAllocationTypePinned cudaMemAllocationTypePinned
#define gpuMemHandleTypeNone cudaMemHandleTypeNone
#define gpuMemLocationTypeDevice cudaMemLocationTypeDevice
#define gpuIpcGetMemHandle cudaIpcGetMemHandle
#define gpuIpcOpenMemHandle cudaIpcOpenMemHandle
#define gpuIpcCloseMemHandle cudaIpcCloseMemHandle
#define gpuIpcMemLazyEnablePeerAccess cudaIpcMemLazyEnablePeerAccess
#define gpuPointerGetAttributes cudaPointerGetAttributes
#define gpuPointerAttributes cudaPointerAttributes
#endif

#if defined(DXG_BACKEND_HIP)
#define DXG_BACKEND_NAME "hip"
using gpuError_t = hipError_t;
using gpuStream_t = hipStream_t;
using gpuEvent_t = hipEvent_t;
using gpuMemPool_t = hipMemPool_t;
using gpuMemPoolProps = hipMemPoolProps;
using gpuIpcMemHandle_t = hipIpcMemHandle_t;
using gpuDeviceProp_t = hipDeviceProp_t;
#define gpuSuccess hipSuccess
#define gpuErrorNoDevice hipErrorNoDevice
#define gpuErrorInsufficientDriver hipErrorInsufficientDriver
#define gpuErrorMemoryAllocation hipErrorOutOfMemory
#define gpuGetErrorString hipGetErrorString
#define gpuGetErrorName hipGetErrorName
#define gpuGetLastError hipGetLastError
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuGetDevice hipGetDevice
#define gpuSetDevice hipSetDevice
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuDeviceGetAttribute hipDeviceGetAttribute
#define gpuDevAttrMemoryPoolsSupported hipDeviceAttributeMemoryPoolsSupported
#define gpuMemGetInfo hipMemGetInfo
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMallocAsync hipMallocAsync
#define gpuFreeAsync hipFreeAsync
#define gpuMallocFromPoolAsync hipMallocFromPoolAsync
#define gpuHostAlloc hipHostMalloc
#define gpuHostAllocDefault hipHostMallocDefault
#define gpuHostAllocPortable hipHostMallocPortable
#define gpuFreeHost hipHostFree
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuMemcpyDefault hipMemcpyDefault
#define gpuMemsetAsync hipMemsetAsync
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamNonBlocking hipStreamNonBlocking
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuStreamWaitEvent hipStreamWaitEvent
#define gpuEventCreateWithFlags hipEventCreateWithFlags
#define gpuEventDisableTiming hipEventDisableTiming
#define gpuEventInterprocess hipEventInterprocess
#define gpuEventDestroy hipEventDestroy
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuDeviceGetDefaultMemPool hipDeviceGetDefaultMemPool
#define gpuMemPoolSetAttribute hipMemPoolSetAttribute
#define gpuMemPoolGetAttribute hipMemPoolGetAttribute
#define gpuMemPoolAttrReleaseThreshold hipMemPoolAttrReleaseThreshold
#define gpuMemPoolAttrReservedMemCurrent hipMemPoolAttrReservedMemCurrent
#define gpuMemPoolAttrReservedMemHigh hipMemPoolAttrReservedMemHigh
#define gpuMemPoolAttrUsedMemCurrent hipMemPoolAttrUsedMemCurrent
#define gpuMemPoolAttrUsedMemHigh hipMemPoolAttrUsedMemHigh
#define gpuMemPoolTrimTo hipMemPoolTrimTo
#define gpuMemPoolCreate hipMemPoolCreate
#define gpuMemPoolDestroy hipMemPoolDestroy
#define gpuMemAllocationTypePinned hipMemAllocationTypePinned
#define gpuMemHandleTypeNone hipMemHandleTypeNone
#define gpuMemLocationTypeDevice hipMemLocationTypeDevice
#define gpuIpcGetMemHandle hipIpcGetMemHandle
#define gpuIpcOpenMemHandle hipIpcOpenMemHandle
#define gpuIpcCloseMemHandle hipIpcCloseMemHandle
#define gpuIpcMemLazyEnablePeerAccess hipIpcMemLazyEnablePeerAccess
#define gpuPointerGetAttributes hipPointerGetAttributes
#define gpuPointerAttributes hipPointerAttribute_t
#endif

#endif  // DEEPX_GPU_PORTABILITY_H_
