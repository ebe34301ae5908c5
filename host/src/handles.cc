// Generation-checked handles (see handles.h for the encoding).
#include "handles.h"

#include <new>

namespace deepx::host {
namespace {

constexpr uint64_t kTagBit = uint64_t{1} << 62;
constexpr int kKindShift = 56;
constexpr uint64_t kKindMask = uint64_t{0xF} << kKindShift;
constexpr int kGenerationShift = 24;
constexpr uint64_t kSlotMask = (uint64_t{1} << 24) - 1;
// Bits that are never set in a handle: a value with any of them is not one.
constexpr uint64_t kForeignBits = ~(kTagBit | kKindMask | (uint64_t{0xFFFFFFFF} << kGenerationShift) |
                                    kSlotMask);

uint64_t Encode(HandleKind kind, uint32_t generation, uint32_t slot) {
  return kTagBit | (static_cast<uint64_t>(kind) << kKindShift) |
         (static_cast<uint64_t>(generation) << kGenerationShift) | slot;
}

}  // namespace

uint64_t HandleTable::Add(void* object) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  uint32_t slot;
  if (!free_.empty()) {
    slot = free_.front();
    free_.pop_front();
  } else {
    if (next_slot_ >= kMaxChunks * kChunkSize) return 0;
    slot = next_slot_;
    uint32_t chunk = slot >> kChunkBits;
    if (chunks_[chunk].load(std::memory_order_relaxed) == nullptr) {
      Entry* entries = new (std::nothrow) Entry[kChunkSize];
      if (entries == nullptr) return 0;
      chunks_[chunk].store(entries, std::memory_order_release);
    }
    ++next_slot_;
  }
  Entry& e = chunks_[slot >> kChunkBits].load(std::memory_order_relaxed)[slot & (kChunkSize - 1)];
  uint32_t generation = e.generation.load(std::memory_order_relaxed);
  e.object.store(object, std::memory_order_release);
  return Encode(kind_, generation, slot);
}

const HandleTable::Entry* HandleTable::Find(uint64_t handle, uint32_t* generation,
                                            HandleProblem* problem) const noexcept {
  if (handle == 0) {
    *problem = HandleProblem::kNull;
    return nullptr;
  }
  if ((handle & kTagBit) == 0 || (handle & kForeignBits) != 0) {
    *problem = HandleProblem::kNotAHandle;
    return nullptr;
  }
  if (((handle & kKindMask) >> kKindShift) != static_cast<uint64_t>(kind_)) {
    *problem = HandleProblem::kWrongKind;
    return nullptr;
  }
  uint32_t slot = static_cast<uint32_t>(handle & kSlotMask);
  const Entry* chunk = chunks_[slot >> kChunkBits].load(std::memory_order_acquire);
  if (chunk == nullptr) {
    *problem = HandleProblem::kNotAHandle;
    return nullptr;
  }
  *generation = static_cast<uint32_t>(handle >> kGenerationShift);
  return &chunk[slot & (kChunkSize - 1)];
}

void* HandleTable::Get(uint64_t handle, HandleProblem* problem) const noexcept {
  uint32_t generation = 0;
  const Entry* e = Find(handle, &generation, problem);
  if (e == nullptr) return nullptr;
  void* object = e->object.load(std::memory_order_acquire);
  if (object == nullptr || e->generation.load(std::memory_order_acquire) != generation) {
    *problem = HandleProblem::kStale;
    return nullptr;
  }
  *problem = HandleProblem::kNone;
  return object;
}

void* HandleTable::Remove(uint64_t handle, HandleProblem* problem) noexcept {
  uint32_t generation = 0;
  const Entry* found = Find(handle, &generation, problem);
  if (found == nullptr) return nullptr;
  Entry* e = const_cast<Entry*>(found);
  std::lock_guard<std::mutex> lock(mutex_);
  void* object = e->object.load(std::memory_order_relaxed);
  if (object == nullptr || e->generation.load(std::memory_order_relaxed) != generation) {
    *problem = HandleProblem::kStale;
    return nullptr;
  }
  uint32_t next = generation + 1;
  if (next == 0) next = 1;  // generation 0 is never issued
  e->generation.store(next, std::memory_order_release);
  e->object.store(nullptr, std::memory_order_release);
  try {
    free_.push_back(static_cast<uint32_t>(handle & kSlotMask));
  } catch (...) {
    // Out of memory: the slot is lost for reuse, which is harmless.
  }
  *problem = HandleProblem::kNone;
  return object;
}

HandleTable& Handles(HandleKind kind) {
  // Never destroyed: handles may be released by static destructors and atexit handlers.
  static HandleTable* const tables[] = {
      nullptr,
      new HandleTable(HandleKind::kRuntime),
      new HandleTable(HandleKind::kTensor),
      new HandleTable(HandleKind::kAttrs),
      new HandleTable(HandleKind::kSafetensors),
      new HandleTable(HandleKind::kTask),
      new HandleTable(HandleKind::kProgram),
  };
  return *tables[static_cast<uint32_t>(kind)];
}

const char* HandleProblemText(HandleProblem problem) {
  switch (problem) {
    case HandleProblem::kNone: return "valid";
    case HandleProblem::kNull: return "null";
    case HandleProblem::kNotAHandle: return "not a handle deepx issued";
    case HandleProblem::kWrongKind: return "a handle of another kind";
    case HandleProblem::kStale: return "destroyed (used after destroy, or destroyed twice)";
  }
  return "invalid";
}

}  // namespace deepx::host
