// Generation-checked handles: what the client API hands out instead of object addresses.
//
// A handle is a pointer-sized value the caller never dereferences:
//   bit 62 set | kind (bits 56-59) | generation (bits 24-55) | slot (bits 0-23).
// With bit 62 set the value is above any address a user-space allocator hands out on the
// 64-bit machines deepx runs on (x86-64 and AArch64 Linux use at most 48 or 52 bits), so it is
// never mistaken for a real object: Go's garbage collector, for one, ignores it. Each slot of a kind's table holds the object and the generation of the handle that
// names it; destroying the handle bumps the generation, so a destroyed, stale or foreign
// handle is recognised and refused instead of being used. Freed slots are reused in FIFO
// order, so a slot comes back only after every other free slot has; the generation is 32 bits.
//
// Threading: Add, Get and Remove may run concurrently from any thread. Get of a handle that
// another thread is removing is the caller's race (the API forbids destroying a handle while
// it is in use): the table itself stays consistent.
#ifndef DEEPX_HOST_SRC_HANDLES_H_
#define DEEPX_HOST_SRC_HANDLES_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>

namespace deepx::host {

enum class HandleKind : uint32_t { kRuntime = 1, kTensor = 2, kAttrs = 3, kSafetensors = 4,
                                    kTask = 5, kProgram = 6 };

// Why a handle was refused, for the error message.
enum class HandleProblem { kNone, kNull, kNotAHandle, kWrongKind, kStale };

class HandleTable {
 public:
  explicit HandleTable(HandleKind kind) : kind_(kind) {}
  HandleTable(const HandleTable&) = delete;
  HandleTable& operator=(const HandleTable&) = delete;

  // Registers `object` and returns its handle, or 0 when the table is full (2^24 live
  // handles of this kind) or out of memory.
  uint64_t Add(void* object) noexcept;
  // The object a live handle names, or null with the reason in `*problem`.
  void* Get(uint64_t handle, HandleProblem* problem) const noexcept;
  // Invalidates a live handle and returns its object (the caller frees it), or null with the
  // reason in `*problem`.
  void* Remove(uint64_t handle, HandleProblem* problem) noexcept;

 private:
  static constexpr uint32_t kChunkBits = 12;
  static constexpr uint32_t kChunkSize = 1u << kChunkBits;
  static constexpr uint32_t kMaxChunks = 1u << (24 - kChunkBits);
  struct Entry {
    std::atomic<uint32_t> generation{1};
    std::atomic<void*> object{nullptr};
  };
  const Entry* Find(uint64_t handle, uint32_t* generation, HandleProblem* problem) const noexcept;

  HandleKind kind_;
  std::mutex mutex_;  // guards allocation of slots and chunks, and the free list
  std::atomic<Entry*> chunks_[kMaxChunks] = {};
  uint32_t next_slot_ = 0;
  std::deque<uint32_t> free_;
};

// One table per kind, for the whole process.
HandleTable& Handles(HandleKind kind);

// "destroyed or stale", "of another kind", ... for messages.
const char* HandleProblemText(HandleProblem problem);

}  // namespace deepx::host

#endif  // DEEPX_HOST_SRC_HANDLES_H_
