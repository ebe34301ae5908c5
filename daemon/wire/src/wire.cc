// deepx::wire: frames, verification, the session and the builders (include/deepx/wire/wire.h).
#include "deepx/wire/wire.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <type_traits>

namespace deepx::wire {

// The schema's Status enum is dx_status_t, value for value.
#define DEEPX_WIRE_CHECK_STATUS(NAME, VALUE, DESC)                                        \
  static_assert(static_cast<int>(fb::Status::NAME) == VALUE && DX_##NAME == VALUE,        \
                "abi/protocol/deepx_wire.fbs: Status::" #NAME " differs from dx_status_t");
DX_STATUS_TABLE(DEEPX_WIRE_CHECK_STATUS)
#undef DEEPX_WIRE_CHECK_STATUS

namespace {

uint32_t LoadU32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
void StoreU32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

// A status read from the wire: a value this reader does not know is DX_UNKNOWN.
dx_status_t KnownStatus(int v) {
  return v >= 0 && v <= static_cast<int>(fb::Status::MAX) ? static_cast<dx_status_t>(v)
                                                          : DX_UNKNOWN;
}

std::string Str(const char* what, uint64_t v) { return std::string(what) + std::to_string(v); }

// ---- field caps, after the Verifier -----------------------------------------------------------

struct Checker {
  const Limits& limits;
  Status status;

  bool Fail(dx_status_t code, std::string message) {
    if (status.ok()) status = Status::Error(code, std::move(message));
    return false;
  }
  bool String(const flatbuffers::String* s, const char* field) {
    if (s && s->size() > limits.max_string_bytes)
      return Fail(DX_OUT_OF_RANGE, std::string(field) + ": " + std::to_string(s->size()) +
                                       " bytes, more than the limit of " +
                                       std::to_string(limits.max_string_bytes));
    return true;
  }
  // The alignment a vector's elements need: their size for scalars, the struct's for structs,
  // 4 for offsets.
  template <typename T>
  static constexpr size_t ElementAlign() {
    if constexpr (std::is_pointer_v<T>)
      return alignof(std::remove_cv_t<std::remove_pointer_t<T>>);
    else if constexpr (std::is_scalar_v<T>)
      return sizeof(T);
    else
      return 4;
  }
  template <typename T>
  bool Count(const flatbuffers::Vector<T>* v, uint64_t cap, const char* field) {
    if (v && v->size() > cap)
      return Fail(DX_OUT_OF_RANGE, std::string(field) + ": " + std::to_string(v->size()) +
                                       " entries, more than the limit of " + std::to_string(cap));
    // FlatBuffers 2.0.8's Verifier checks a vector's length field for 4-byte alignment only;
    // 8-byte elements at a 4-byte boundary would be misaligned loads (found by fuzz_wire).
    constexpr size_t align = ElementAlign<T>();
    if (v && v->size() > 0 && reinterpret_cast<uintptr_t>(v->Data()) % align != 0)
      return Fail(DX_INVALID_ARGUMENT, std::string(field) + ": elements not aligned to " +
                                           std::to_string(align) + " bytes");
    return true;
  }
  bool Shape(const flatbuffers::Vector<int64_t>* shape, const char* field) {
    if (!Count(shape, limits.max_rank, field)) return false;
    if (shape)
      for (int64_t d : *shape)
        if (d < 0) return Fail(DX_INVALID_ARGUMENT, std::string(field) + ": negative extent " +
                                                        std::to_string(d));
    return true;
  }
  bool Required(const void* p, const char* field) {
    if (!p) return Fail(DX_INVALID_ARGUMENT, std::string(field) + " is missing");
    return true;
  }
  bool Attr(const fb::Attr* a) {
    if (!Required(a, "Invoke.attrs[]") || !Required(a->name(), "Attr.name") ||
        !String(a->name(), "Attr.name") || !String(a->s(), "Attr.s") ||
        !Count(a->ints(), limits.max_attr_elements, "Attr.ints") ||
        !Count(a->floats(), limits.max_attr_elements, "Attr.floats"))
      return false;
    if (static_cast<uint8_t>(a->type()) > static_cast<uint8_t>(fb::AttrType::MAX))
      return Fail(DX_UNSUPPORTED, Str("Attr.type: unknown attribute type ",
                                      static_cast<uint8_t>(a->type())));
    return true;
  }
  bool Invoke(const fb::Invoke* op, const char* what) {
    if (!Required(op, what) || !Required(op->op(), "Invoke.op") || !String(op->op(), "Invoke.op") ||
        !String(op->plugin(), "Invoke.plugin") ||
        !Count(op->inputs(), limits.max_tensors_per_op, "Invoke.inputs") ||
        !Count(op->outputs(), limits.max_tensors_per_op, "Invoke.outputs") ||
        !Count(op->attrs(), limits.max_attrs, "Invoke.attrs"))
      return false;
    if (op->attrs())
      for (const fb::Attr* a : *op->attrs())
        if (!Attr(a)) return false;
    return true;
  }
  bool Handle(const fb::TensorHandle* h, const char* field) { return Required(h, field); }

  bool Request(const fb::Request& r) {
    using T = fb::RequestBody;
    if (r.body_type() != T::NONE && !r.body())
      return Fail(DX_INVALID_ARGUMENT, "the request's body (type " +
                                           std::to_string(static_cast<int>(r.body_type())) +
                                           ") is missing");
    switch (r.body_type()) {
      case T::NONE:
        return Fail(DX_INVALID_ARGUMENT, "the request has no body");
      case T::Hello:
        return String(r.body_as_Hello()->client_name(), "Hello.client_name");
      case T::ListPlugins:
      case T::ListOps:
      case T::ListDevices:
      case T::Stats:
      case T::Cancel:
        return true;
      case T::ListKernels: {
        auto* m = r.body_as_ListKernels();
        return String(m->op(), "ListKernels.op") && String(m->plugin(), "ListKernels.plugin");
      }
      case T::TensorCreate: {
        auto* m = r.body_as_TensorCreate();
        return Shape(m->shape(), "TensorCreate.shape") &&
               Required(m->device(), "TensorCreate.device") &&
               String(m->device(), "TensorCreate.device");
      }
      case T::TensorFree:
        return Handle(r.body_as_TensorFree()->tensor(), "TensorFree.tensor");
      case T::TensorWrite:
        return Handle(r.body_as_TensorWrite()->tensor(), "TensorWrite.tensor");
      case T::TensorRead:
        return Handle(r.body_as_TensorRead()->tensor(), "TensorRead.tensor");
      case T::TensorCopy: {
        auto* m = r.body_as_TensorCopy();
        return Handle(m->src(), "TensorCopy.src") && Handle(m->dst(), "TensorCopy.dst");
      }
      case T::TensorView: {
        auto* m = r.body_as_TensorView();
        if (!Handle(m->base(), "TensorView.base") || !Shape(m->shape(), "TensorView.shape") ||
            !Count(m->strides(), limits.max_rank, "TensorView.strides"))
          return false;
        size_t rank = m->shape() ? m->shape()->size() : 0;
        if (m->strides() && m->strides()->size() != rank)
          return Fail(DX_INVALID_ARGUMENT, "TensorView: " + std::to_string(m->strides()->size()) +
                                               " strides for a shape of rank " +
                                               std::to_string(rank));
        return true;
      }
      case T::TensorName: {
        auto* m = r.body_as_TensorName();
        return Handle(m->tensor(), "TensorName.tensor") && Required(m->name(), "TensorName.name") &&
               String(m->name(), "TensorName.name");
      }
      case T::TensorOpen: {
        auto* m = r.body_as_TensorOpen();
        return Required(m->name(), "TensorOpen.name") && String(m->name(), "TensorOpen.name");
      }
      case T::TensorUnname: {
        auto* m = r.body_as_TensorUnname();
        return Required(m->name(), "TensorUnname.name") && String(m->name(), "TensorUnname.name");
      }
      case T::Invoke:
        return Invoke(r.body_as_Invoke(), "Invoke");
      case T::Submit: {
        auto* m = r.body_as_Submit();
        if (!Required(m->ops(), "Submit.ops") ||
            !Count(m->ops(), limits.max_program_ops, "Submit.ops"))
          return false;
        if (m->ops()->size() == 0) return Fail(DX_INVALID_ARGUMENT, "Submit: an empty program");
        for (const fb::Invoke* op : *m->ops())
          if (!Invoke(op, "Submit.ops[]")) return false;
        return true;
      }
    }
    // A member of a newer minor's union: the Verifier could not look inside it.
    return Fail(DX_UNSUPPORTED,
                "unknown request type " + std::to_string(static_cast<int>(r.body_type())) +
                    " (from a newer protocol minor?); this reader speaks " +
                    std::to_string(kProtocolMajor) + "." + std::to_string(kProtocolMinor));
  }

  template <typename V, typename F>
  bool Each(const V* v, const char* field, F f) {
    if (!Count(v, limits.max_list_entries, field)) return false;
    if (v)
      for (auto* e : *v)
        if (!Required(e, field) || !f(e)) return false;
    return true;
  }
  bool Reply(const fb::Reply& r) {
    if (!String(r.message(), "Reply.message")) return false;
    using T = fb::ReplyBody;
    if (r.body_type() != T::NONE && !r.body())
      return Fail(DX_INVALID_ARGUMENT, "the reply's body (type " +
                                           std::to_string(static_cast<int>(r.body_type())) +
                                           ") is missing");
    switch (r.body_type()) {
      case T::HelloReply:
        return String(r.body_as_HelloReply()->server_name(), "HelloReply.server_name");
      case T::PluginList:
        return Each(r.body_as_PluginList()->plugins(), "PluginList.plugins", [&](auto* p) {
          return String(p->name(), "PluginInfo.name") && String(p->version(), "PluginInfo.version");
        });
      case T::OpList:
        return Each(r.body_as_OpList()->ops(), "OpList.ops",
                    [&](auto* s) { return String(s, "OpList.ops[]"); });
      case T::DeviceList:
        return Each(r.body_as_DeviceList()->devices(), "DeviceList.devices", [&](auto* d) {
          return String(d->name(), "DeviceInfo.name") && String(d->plugin(), "DeviceInfo.plugin") &&
                 String(d->kind(), "DeviceInfo.kind");
        });
      case T::KernelList:
        return Each(r.body_as_KernelList()->kernels(), "KernelList.kernels", [&](auto* k) {
          return String(k->op(), "KernelInfo.op") && String(k->plugin(), "KernelInfo.plugin") &&
                 String(k->device(), "KernelInfo.device") &&
                 Count(k->dtypes(), 64, "KernelInfo.dtypes");
        });
      case T::TensorInfo: {
        auto* m = r.body_as_TensorInfo();
        return Handle(m->tensor(), "TensorInfo.tensor") && Shape(m->shape(), "TensorInfo.shape") &&
               Count(m->strides(), limits.max_rank, "TensorInfo.strides") &&
               String(m->device(), "TensorInfo.device");
      }
      default:
        // NONE, SubmitResult and StatsReply hold no strings or vectors; a payload of a newer
        // minor is ignored by the reader (Reply.body is then not used).
        return true;
    }
  }
};

template <typename Root>
Status Verify(std::span<const uint8_t> header, const Limits& limits, const char* what) {
  if (header.size() < 8)
    return Status::Error(DX_INVALID_ARGUMENT, std::string("malformed ") + what + ": " +
                                                  std::to_string(header.size()) +
                                                  " bytes, too short for a FlatBuffer");
  if (reinterpret_cast<uintptr_t>(header.data()) % 8 != 0)
    return Status::Error(DX_INVALID_ARGUMENT, std::string("malformed ") + what +
                                                  ": the buffer is not 8-byte aligned in memory");
  if (!flatbuffers::BufferHasIdentifier(header.data(), fb::RequestIdentifier()))
    return Status::Error(DX_INVALID_ARGUMENT, std::string("malformed ") + what +
                                                  ": the FlatBuffer's identifier is not \"DXW1\"");
  flatbuffers::Verifier::Options opts;
  opts.max_depth = limits.max_depth;
  opts.max_tables = limits.max_tables;
  opts.check_alignment = true;
  flatbuffers::Verifier verifier(header.data(), header.size(), opts);
  if (!verifier.VerifyBuffer<Root>(fb::RequestIdentifier()))
    return Status::Error(DX_INVALID_ARGUMENT,
                         std::string("malformed ") + what +
                             ": FlatBuffers verification failed (bad offsets, sizes, or more than "
                             "the limits of " + std::to_string(limits.max_depth) + " levels / " +
                             std::to_string(limits.max_tables) + " tables)");
  return Status::Ok();
}

}  // namespace

Status Limits::validate() const {
  if (max_header_bytes < 64 || max_header_bytes > kMaxHeaderBytes)
    return Status::Error(DX_INVALID_ARGUMENT, "Limits.max_header_bytes must lie in 64.." +
                                                  std::to_string(kMaxHeaderBytes));
  if (max_bulk_frame_bytes < 1 || max_bulk_frame_bytes > kMaxBulkFrameBytes)
    return Status::Error(DX_INVALID_ARGUMENT, "Limits.max_bulk_frame_bytes must lie in 1.." +
                                                  std::to_string(kMaxBulkFrameBytes));
  if (max_depth < 2 || max_tables < 1)
    return Status::Error(DX_INVALID_ARGUMENT, "Limits.max_depth must be >= 2, max_tables >= 1");
  return Status::Ok();
}

const char* StatusName(int code) {
  switch (code) {
#define DEEPX_WIRE_NAME(NAME, VALUE, DESC) \
  case VALUE:                              \
    return "DX_" #NAME;
    DX_STATUS_TABLE(DEEPX_WIRE_NAME)
#undef DEEPX_WIRE_NAME
    default:
      return "DX_UNKNOWN";
  }
}

// ---- frames -----------------------------------------------------------------------------------

Status AppendFrame(std::vector<uint8_t>& out, bool bulk, std::span<const uint8_t> payload,
                   const Limits& limits) {
  uint64_t cap = bulk ? limits.max_bulk_frame_bytes : limits.max_header_bytes;
  if (payload.empty())
    return Status::Error(DX_INVALID_ARGUMENT, "a frame cannot be empty");
  if (payload.size() > cap)
    return Status::Error(DX_OUT_OF_RANGE, std::string(bulk ? "bulk" : "header") + " frame of " +
                                              std::to_string(payload.size()) +
                                              " bytes, more than the limit of " +
                                              std::to_string(cap));
  out.insert(out.end(), kFrameMagic, kFrameMagic + 4);
  StoreU32(out, bulk ? kFrameFlagBulk : 0u);
  StoreU32(out, static_cast<uint32_t>(payload.size()));
  out.insert(out.end(), payload.begin(), payload.end());
  return Status::Ok();
}

void WriteFrameHeader(uint8_t* out, bool bulk, uint32_t length) {
  std::memcpy(out, kFrameMagic, 4);
  const uint32_t flags = bulk ? kFrameFlagBulk : 0u;
  for (int k = 0; k < 4; ++k) {
    out[4 + k] = static_cast<uint8_t>(flags >> (8 * k));
    out[8 + k] = static_cast<uint8_t>(length >> (8 * k));
  }
}

Status FrameReader::Feed(std::span<const uint8_t> data) {
  size_t consumed = 0;
  return FeedImpl(data, &consumed, false);
}

Status FrameReader::FeedUntilBulk(std::span<const uint8_t> data, size_t* consumed) {
  return FeedImpl(data, consumed, true);
}

void FrameReader::ConsumeBulkPayload(size_t n) {
  if (!in_bulk_payload()) return;
  n = std::min(n, need_);
  need_ -= n;
  offset_ += n;
  if (need_ == 0) {
    in_payload_ = false;
    streaming_ = false;
    current_ = Frame{};
  }
}

Status FrameReader::FeedImpl(std::span<const uint8_t> data, size_t* consumed,
                             bool stop_at_bulk) {
  *consumed = 0;
  if (!error_.ok()) return error_;
  size_t i = 0;
  while (i < data.size()) {
    if (streaming_) break;  // the streamed payload is the caller's to take
    if (!in_payload_) {
      uint8_t b = data[i];
      if (header_have_ < 4 && b != kFrameMagic[header_have_]) {
        error_ = Status::Error(DX_INVALID_ARGUMENT,
                               "bad frame magic at stream offset " + std::to_string(offset_) +
                                   " (expected \"DXWF\"): not a deepx wire stream, or out of "
                                   "step with it");
        *consumed = i;
        return error_;
      }
      header_[header_have_++] = b;
      ++i;
      ++offset_;
      if (header_have_ < kFrameHeaderBytes) continue;
      uint32_t flags = LoadU32(header_ + 4);
      uint32_t length = LoadU32(header_ + 8);
      uint64_t frame_at = offset_ - kFrameHeaderBytes;
      if (flags & ~kFrameFlagBulk) {
        error_ = Status::Error(DX_INVALID_ARGUMENT,
                               "frame at stream offset " + std::to_string(frame_at) +
                                   ": reserved flag bits set (flags 0x" + [&] {
                                     char buf[16];
                                     snprintf(buf, sizeof buf, "%08x", flags);
                                     return std::string(buf);
                                   }() + ")");
        *consumed = i;
        return error_;
      }
      bool bulk = (flags & kFrameFlagBulk) != 0;
      uint32_t cap = bulk ? limits_.max_bulk_frame_bytes : limits_.max_header_bytes;
      if (length == 0) {
        error_ = Status::Error(DX_INVALID_ARGUMENT,
                               "empty frame at stream offset " + std::to_string(frame_at));
        *consumed = i;
        return error_;
      }
      if (length > cap) {
        error_ = Status::Error(DX_RESOURCE_EXHAUSTED,
                               std::string(bulk ? "bulk" : "header") + " frame at stream offset " +
                                   std::to_string(frame_at) + " announces " +
                                   std::to_string(length) + " bytes, more than the limit of " +
                                   std::to_string(cap));
        *consumed = i;
        return error_;
      }
      current_ = Frame{};
      current_.bulk = bulk;
      need_ = length;
      length_ = length;
      in_payload_ = true;
      header_have_ = 0;
      if (bulk && stop_at_bulk) {
        streaming_ = true;
        break;
      }
      current_.payload.reserve(length);
    } else {
      size_t take = std::min(need_, data.size() - i);
      current_.payload.insert(current_.payload.end(), data.begin() + i, data.begin() + i + take);
      i += take;
      offset_ += take;
      need_ -= take;
      if (need_ == 0) {
        ready_.push_back(std::move(current_));
        current_ = Frame{};
        in_payload_ = false;
      }
    }
  }
  *consumed = i;
  return Status::Ok();
}

bool FrameReader::Next(Frame& out) {
  if (ready_.empty()) return false;
  out = std::move(ready_.front());
  ready_.pop_front();
  return true;
}

Status FrameReader::Finish() const {
  if (!error_.ok()) return error_;
  if (in_payload_)
    return Status::Error(DX_IO_ERROR, "stream ended inside a frame: " + std::to_string(need_) +
                                          " of " + std::to_string(length_) +
                                          " payload bytes missing");
  if (header_have_ > 0)
    return Status::Error(DX_IO_ERROR, "stream ended inside a frame header: " +
                                          std::to_string(header_have_) + " of " +
                                          std::to_string(kFrameHeaderBytes) + " bytes");
  return Status::Ok();
}

// ---- verification -----------------------------------------------------------------------------

Status VerifyRequest(std::span<const uint8_t> header, const Limits& limits) {
  Status s = Verify<fb::Request>(header, limits, "request");
  if (!s.ok()) return s;
  Checker c{limits, {}};
  c.Request(*flatbuffers::GetRoot<fb::Request>(header.data()));
  return c.status;
}

Status VerifyReply(std::span<const uint8_t> header, const Limits& limits) {
  Status s = Verify<fb::Reply>(header, limits, "reply");
  if (!s.ok()) return s;
  Checker c{limits, {}};
  c.Reply(*flatbuffers::GetRoot<fb::Reply>(header.data()));
  return c.status;
}

// ---- the session ------------------------------------------------------------------------------

Event Session::Fail(dx_status_t code, std::string message, uint64_t task_id, bool fatal) {
  Event e;
  e.kind = Event::Kind::kError;
  e.error = Status::Error(code, std::move(message));
  e.task_id = task_id;
  e.fatal = fatal;
  if (fatal) closed_ = true;
  return e;
}

std::optional<Event> Session::OnFrame(Frame&& frame) {
  if (closed_) return Fail(DX_FAILED_PRECONDITION, "the session is closed", 0, true);
  return frame.bulk ? OnBulk(std::move(frame)) : OnHeader(std::move(frame));
}

std::optional<Event> Session::OnHeader(Frame&& frame) {
  if (bulk_left_ > 0)
    return Fail(DX_INVALID_ARGUMENT,
                "bulk length mismatch: " + std::to_string(bulk_left_) +
                    " bulk bytes of task " + std::to_string(pending_.task_id) +
                    " still expected, got a header frame",
                pending_.task_id, true);
  std::span<const uint8_t> bytes(frame.payload);
  const bool server = role_ == Role::kServer;
  Status verified = server ? Verify<fb::Request>(bytes, limits_, "request")
                           : Verify<fb::Reply>(bytes, limits_, "reply");
  if (!verified.ok()) return Fail(verified.code, verified.message, 0, true);

  // The frame verified: its task id and bulk_bytes can be read.
  uint64_t task_id, bulk_bytes;
  Checker checker{limits_, {}};
  bool fields_ok;
  if (server) {
    auto* r = flatbuffers::GetRoot<fb::Request>(frame.payload.data());
    task_id = r->task_id();
    bulk_bytes = r->bulk_bytes();
    fields_ok = checker.Request(*r);
  } else {
    auto* r = flatbuffers::GetRoot<fb::Reply>(frame.payload.data());
    task_id = r->task_id();
    bulk_bytes = r->bulk_bytes();
    fields_ok = checker.Reply(*r);
  }
  if (bulk_bytes > limits_.max_bulk_bytes)
    return Fail(DX_RESOURCE_EXHAUSTED,
                "task " + std::to_string(task_id) + " announces " + std::to_string(bulk_bytes) +
                    " bulk bytes, more than the limit of " + std::to_string(limits_.max_bulk_bytes),
                task_id, true);

  // The error (if any) that answers this message; its bulk frames are then skipped.
  std::optional<Event> refusal;
  if (server) {
    auto* r = flatbuffers::GetRoot<fb::Request>(frame.payload.data());
    bool is_hello = r->body_type() == fb::RequestBody::Hello;
    if (is_hello && !fields_ok) {
      refusal = Fail(checker.status.code, checker.status.message, task_id, false);
    } else if (is_hello) {
      auto* h = r->body_as_Hello();
      if (hello_done_) {
        refusal = Fail(DX_FAILED_PRECONDITION,
                       "out of order: a second Hello (the session said hello already)", task_id,
                       false);
      } else if (h->major() != kProtocolMajor) {
        return Fail(DX_VERSION_MISMATCH,
                    "protocol major " + std::to_string(h->major()) + "." +
                        std::to_string(h->minor()) + " refused: this daemon speaks " +
                        std::to_string(kProtocolMajor) + "." + std::to_string(kProtocolMinor),
                    task_id, true);
      } else {
        hello_done_ = true;
        peer_major_ = h->major();
        peer_minor_ = h->minor();
      }
    } else if (!hello_done_) {
      refusal = Fail(DX_FAILED_PRECONDITION,
                     "out of order: the first request of a session must be Hello", task_id,
                     false);
    } else if (!fields_ok) {
      refusal = Fail(checker.status.code, checker.status.message, task_id, false);
    } else if (bulk_bytes > 0 && r->body_type() != fb::RequestBody::TensorWrite) {
      refusal = Fail(DX_INVALID_ARGUMENT,
                     "only TensorWrite carries bulk bytes (task " + std::to_string(task_id) +
                         " announces " + std::to_string(bulk_bytes) + ")",
                     task_id, false);
    }
  } else {
    auto* r = flatbuffers::GetRoot<fb::Reply>(frame.payload.data());
    if (!fields_ok) return Fail(checker.status.code, checker.status.message, task_id, true);
    if (!hello_done_) {
      if (r->status() != fb::Status::OK)
        return Fail(KnownStatus(static_cast<int>(r->status())),
                    std::string("the daemon refused the Hello: ") +
                        (r->message() ? r->message()->str() : std::string()),
                    task_id, true);
      if (r->body_type() != fb::ReplyBody::HelloReply)
        return Fail(DX_FAILED_PRECONDITION,
                    "out of order: the first reply of a session must be the HelloReply", task_id,
                    true);
      auto* h = r->body_as_HelloReply();
      if (h->major() != kProtocolMajor)
        return Fail(DX_VERSION_MISMATCH,
                    "the daemon speaks protocol " + std::to_string(h->major()) + "." +
                        std::to_string(h->minor()) + "; this client speaks " +
                        std::to_string(kProtocolMajor) + "." + std::to_string(kProtocolMinor),
                    task_id, true);
      hello_done_ = true;
      peer_major_ = h->major();
      peer_minor_ = h->minor();
    } else if (r->body_type() == fb::ReplyBody::HelloReply) {
      return Fail(DX_FAILED_PRECONDITION, "out of order: a second HelloReply", task_id, true);
    }
  }

  if (refusal) {
    if (bulk_bytes > 0) {
      bulk_left_ = bulk_bytes;
      bulk_have_ = 0;
      frame_left_ = 0;
      skip_ = true;
      pending_ = Message{};
      pending_.task_id = task_id;
      skipped_error_ = std::move(refusal);
      return std::nullopt;  // answered once its bulk frames have been read past
    }
    return refusal;
  }
  Message m;
  m.task_id = task_id;
  m.header = std::move(frame.payload);
  if (bulk_bytes > 0) {
    bulk_left_ = bulk_bytes;
    bulk_have_ = 0;
    frame_left_ = 0;
    skip_ = false;
    pending_ = std::move(m);
    to_dst_ = dst_set_ && dst_task_ == task_id && dst_.size() == bulk_bytes;
    if (to_dst_) {
      dst_set_ = false;  // one message
      pending_.bulk_in_destination = true;
    } else {
      // One buffer for all the bulk frames (address space only until the bytes arrive).
      pending_.bulk.reserve(static_cast<size_t>(bulk_bytes));
    }
    return std::nullopt;
  }
  Event e;
  e.kind = Event::Kind::kMessage;
  e.task_id = task_id;
  e.message = std::move(m);
  return e;
}

std::optional<Event> Session::OnBulk(Frame&& frame) {
  std::optional<Event> e = OnBulkStart(frame.payload.size());
  if (e) return e;
  if (!skip_ && !to_dst_ && bulk_have_ == 0 && frame.payload.size() == bulk_left_) {
    // The whole bulk in one frame: its buffer becomes the message's.
    pending_.bulk = std::move(frame.payload);
    frame_left_ = 0;
    bulk_left_ = 0;
    bulk_have_ = pending_.bulk.size();
    return CommitBulk(0);
  }
  return OnBulkBytes(frame.payload);
}

std::optional<Event> Session::OnBulkStart(uint64_t length) {
  if (closed_) return Fail(DX_FAILED_PRECONDITION, "the session is closed", 0, true);
  if (bulk_left_ == 0)
    return Fail(DX_INVALID_ARGUMENT,
                "bulk length mismatch: a bulk frame of " + std::to_string(length) +
                    " bytes that no header announced",
                0, true);
  if (length > bulk_left_)
    return Fail(DX_INVALID_ARGUMENT,
                "bulk length mismatch: a bulk frame of " + std::to_string(length) +
                    " bytes where task " + std::to_string(pending_.task_id) + " has only " +
                    std::to_string(bulk_left_) + " left",
                pending_.task_id, true);
  frame_left_ = length;
  // The buffer was reserved at bulk_bytes when the header verified: no reallocation here.
  if (!skip_ && !to_dst_ && length > 0) pending_.bulk.resize(bulk_have_ + length);
  return std::nullopt;
}

std::span<uint8_t> Session::BulkWindow() {
  if (skip_ || frame_left_ == 0 || closed_) return {};
  uint8_t* base = to_dst_ ? dst_.data() : pending_.bulk.data();
  return std::span<uint8_t>(base + bulk_have_, frame_left_);
}

void Session::SetBulkDestination(uint64_t task_id, std::span<uint8_t> destination) {
  dst_task_ = task_id;
  dst_ = destination;
  dst_set_ = true;
}

void Session::ClearBulkDestination() {
  dst_set_ = false;
  if (to_dst_ && (bulk_left_ > 0 || frame_left_ > 0)) {
    // The message now arriving keeps its bytes out of the destination: they are skipped and
    // the message comes out as an error.
    to_dst_ = false;
    skip_ = true;
    skipped_error_ = Fail(DX_CANCELLED,
                          "the bulk destination of task " + std::to_string(pending_.task_id) +
                              " was withdrawn before its bytes arrived",
                          pending_.task_id, false);
  }
  dst_ = {};
}

std::optional<Event> Session::OnBulkBytes(std::span<const uint8_t> bytes) {
  size_t n = std::min<uint64_t>(bytes.size(), frame_left_);
  if (!skip_ && n > 0)
    std::memcpy((to_dst_ ? dst_.data() : pending_.bulk.data()) + bulk_have_, bytes.data(), n);
  return CommitBulk(n);
}

std::optional<Event> Session::CommitBulk(size_t n) {
  n = std::min<uint64_t>(n, frame_left_);
  frame_left_ -= n;
  bulk_left_ -= n;
  if (!skip_) bulk_have_ += n;
  if (bulk_left_ > 0 || frame_left_ > 0) return std::nullopt;
  bulk_have_ = 0;
  if (to_dst_) {
    to_dst_ = false;
    dst_ = {};
  }
  if (skip_) {
    skip_ = false;
    std::optional<Event> e = std::move(skipped_error_);
    skipped_error_.reset();
    pending_ = Message{};
    return e;
  }
  Event e;
  e.kind = Event::Kind::kMessage;
  e.task_id = pending_.task_id;
  e.message = std::move(pending_);
  pending_ = Message{};
  return e;
}

Status Session::Finish() const {
  if (bulk_left_ > 0)
    return Status::Error(DX_IO_ERROR, "stream ended with " + std::to_string(bulk_left_) +
                                          " bulk bytes of task " +
                                          std::to_string(pending_.task_id) + " missing");
  return Status::Ok();
}

void StreamDecoder::Emit(std::optional<Event>&& e, std::vector<Event>& out) {
  if (!e) return;
  if (e->fatal) {
    closed_ = true;
    fatal_ = e->error;
  }
  out.push_back(std::move(*e));
}

void StreamDecoder::Feed(std::span<const uint8_t> data, std::vector<Event>& out) {
  while (!closed_) {
    if (reader_.in_bulk_payload()) {
      // A bulk frame's payload: straight into the message's buffer (or past, when skipped).
      size_t n = std::min(reader_.bulk_payload_left(), data.size());
      if (n == 0) return;
      reader_.ConsumeBulkPayload(n);
      Emit(session_.OnBulkBytes(data.first(n)), out);
      data = data.subspan(n);
      continue;
    }
    if (data.empty()) return;
    size_t used = 0;
    Status s = reader_.FeedUntilBulk(data, &used);
    data = data.subspan(used);
    Frame f;
    while (!closed_ && reader_.Next(f)) Emit(session_.OnFrame(std::move(f)), out);
    if (closed_) return;
    if (!s.ok()) {
      Event e;
      e.kind = Event::Kind::kError;
      e.error = std::move(s);
      e.fatal = true;
      Emit(std::move(e), out);
      return;
    }
    if (reader_.in_bulk_payload()) Emit(session_.OnBulkStart(reader_.bulk_payload_left()), out);
  }
}

std::span<uint8_t> StreamDecoder::BulkWindow() {
  if (closed_ || !reader_.in_bulk_payload()) return {};
  std::span<uint8_t> w = session_.BulkWindow();
  return w.first(std::min(w.size(), reader_.bulk_payload_left()));
}

void StreamDecoder::CommitBulk(size_t n, std::vector<Event>& out) {
  if (closed_ || !reader_.in_bulk_payload()) return;
  n = std::min(n, BulkWindow().size());
  reader_.ConsumeBulkPayload(n);
  Emit(session_.CommitBulk(n), out);
}

Status StreamDecoder::Finish() const {
  if (closed_) return fatal_;  // the rest of the stream was not read
  Status s = reader_.Finish();
  if (!s.ok()) return s;
  return session_.Finish();
}

// ---- building ---------------------------------------------------------------------------------

namespace {

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

std::vector<uint8_t> Done(FlatBufferBuilder& b, Offset<fb::Request> root) {
  b.Finish(root, fb::RequestIdentifier());
  return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}
std::vector<uint8_t> Done(FlatBufferBuilder& b, Offset<fb::Reply> root) {
  b.Finish(root, fb::RequestIdentifier());
  return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}
template <typename T>
std::vector<uint8_t> Req(FlatBufferBuilder& b, uint64_t task_id, Offset<T> body,
                         uint64_t bulk_bytes = 0) {
  return Done(b, fb::CreateRequest(b, task_id, fb::RequestBodyTraits<T>::enum_value, body.Union(),
                                   bulk_bytes));
}
Offset<flatbuffers::String> S(FlatBufferBuilder& b, std::string_view s) {
  return b.CreateString(s.data(), s.size());
}
Offset<flatbuffers::Vector<int64_t>> Longs(FlatBufferBuilder& b, std::span<const int64_t> v) {
  return b.CreateVector(v.data(), v.size());
}
Offset<flatbuffers::Vector<const fb::TensorHandle*>> Handles(FlatBufferBuilder& b,
                                                             const std::vector<uint64_t>& v) {
  std::vector<fb::TensorHandle> hs;
  hs.reserve(v.size());
  for (uint64_t h : v) hs.emplace_back(h);
  return b.CreateVectorOfStructs(hs);
}
Offset<fb::Invoke> BuildInvoke(FlatBufferBuilder& b, const OpCall& c) {
  std::vector<Offset<fb::Attr>> attrs;
  for (const AttrValue& a : c.attrs) {
    auto name = S(b, a.name);
    auto ints = a.ints.empty() ? 0 : b.CreateVector(a.ints);
    auto floats = a.floats.empty() ? 0 : b.CreateVector(a.floats);
    auto s = a.type == fb::AttrType::STRING ? S(b, a.s) : 0;
    attrs.push_back(fb::CreateAttr(b, name, a.type, a.i, a.f, ints, floats, s));
  }
  auto op = S(b, c.op);
  auto in = Handles(b, c.inputs);
  auto out = Handles(b, c.outputs);
  auto av = b.CreateVector(attrs);
  auto plugin = c.plugin.empty() ? 0 : S(b, c.plugin);
  return fb::CreateInvoke(b, op, in, out, av, plugin, c.backward);
}
template <typename T>
std::vector<uint8_t> Rep(FlatBufferBuilder& b, uint64_t task_id, dx_status_t code,
                         std::string_view message, Offset<T> body, uint64_t bulk_bytes = 0) {
  auto m = message.empty() ? 0 : S(b, message);
  return Done(b, fb::CreateReply(b, task_id, static_cast<fb::Status>(code), m,
                                 fb::ReplyBodyTraits<T>::enum_value, body.Union(), bulk_bytes));
}

template <typename Root>
Status Encode(std::vector<uint8_t>& out, std::span<const uint8_t> header,
              std::span<const uint8_t> bulk, const Limits& limits, const char* what) {
  Status s = Verify<Root>(header, limits, what);
  if (!s.ok()) return s;
  uint64_t announced = flatbuffers::GetRoot<Root>(header.data())->bulk_bytes();
  if (announced != bulk.size())
    return Status::Error(DX_INVALID_ARGUMENT,
                         std::string("bulk length mismatch: the ") + what + " announces " +
                             std::to_string(announced) + " bulk bytes, " +
                             std::to_string(bulk.size()) + " given");
  if (bulk.size() > limits.max_bulk_bytes)
    return Status::Error(DX_RESOURCE_EXHAUSTED, std::to_string(bulk.size()) +
                                                    " bulk bytes, more than the limit of " +
                                                    std::to_string(limits.max_bulk_bytes));
  size_t start = out.size();
  s = AppendFrame(out, false, header, limits);
  for (size_t at = 0; s.ok() && at < bulk.size(); at += limits.max_bulk_frame_bytes) {
    size_t n = std::min<size_t>(limits.max_bulk_frame_bytes, bulk.size() - at);
    s = AppendFrame(out, true, bulk.subspan(at, n), limits);
  }
  if (!s.ok()) out.resize(start);
  return s;
}

template <typename Root>
Status EncodeHeaderOnly(std::vector<uint8_t>& out, std::span<const uint8_t> header,
                        uint64_t bulk_bytes, const Limits& limits, const char* what) {
  Status s = Verify<Root>(header, limits, what);
  if (!s.ok()) return s;
  uint64_t announced = flatbuffers::GetRoot<Root>(header.data())->bulk_bytes();
  if (announced != bulk_bytes)
    return Status::Error(DX_INVALID_ARGUMENT,
                         std::string("bulk length mismatch: the ") + what + " announces " +
                             std::to_string(announced) + " bulk bytes, " +
                             std::to_string(bulk_bytes) + " given");
  if (bulk_bytes > limits.max_bulk_bytes)
    return Status::Error(DX_RESOURCE_EXHAUSTED, std::to_string(bulk_bytes) +
                                                    " bulk bytes, more than the limit of " +
                                                    std::to_string(limits.max_bulk_bytes));
  return AppendFrame(out, false, header, limits);
}

}  // namespace

Status EncodeRequestHeader(std::vector<uint8_t>& out, std::span<const uint8_t> header,
                           uint64_t bulk_bytes, const Limits& limits) {
  return EncodeHeaderOnly<fb::Request>(out, header, bulk_bytes, limits, "request");
}
Status EncodeReplyHeader(std::vector<uint8_t>& out, std::span<const uint8_t> header,
                         uint64_t bulk_bytes, const Limits& limits) {
  return EncodeHeaderOnly<fb::Reply>(out, header, bulk_bytes, limits, "reply");
}

Status EncodeRequest(std::vector<uint8_t>& out, std::span<const uint8_t> header,
                     std::span<const uint8_t> bulk, const Limits& limits) {
  return Encode<fb::Request>(out, header, bulk, limits, "request");
}
Status EncodeReply(std::vector<uint8_t>& out, std::span<const uint8_t> header,
                   std::span<const uint8_t> bulk, const Limits& limits) {
  return Encode<fb::Reply>(out, header, bulk, limits, "reply");
}

namespace request {
std::vector<uint8_t> Hello(uint64_t task_id, std::string_view client_name, uint16_t major,
                           uint16_t minor, uint64_t resume_token) {
  FlatBufferBuilder b;
  auto name = S(b, client_name);
  return Req(b, task_id, fb::CreateHello(b, major, minor, name, resume_token));
}
std::vector<uint8_t> ListPlugins(uint64_t task_id) {
  FlatBufferBuilder b;
  return Req(b, task_id, fb::CreateListPlugins(b));
}
std::vector<uint8_t> ListOps(uint64_t task_id) {
  FlatBufferBuilder b;
  return Req(b, task_id, fb::CreateListOps(b));
}
std::vector<uint8_t> ListDevices(uint64_t task_id) {
  FlatBufferBuilder b;
  return Req(b, task_id, fb::CreateListDevices(b));
}
std::vector<uint8_t> ListKernels(uint64_t task_id, std::string_view op, std::string_view plugin) {
  FlatBufferBuilder b;
  auto o = S(b, op);
  auto p = S(b, plugin);
  return Req(b, task_id, fb::CreateListKernels(b, o, p));
}
std::vector<uint8_t> TensorCreate(uint64_t task_id, uint32_t dtype, std::span<const int64_t> shape,
                                  std::string_view device) {
  FlatBufferBuilder b;
  auto sh = Longs(b, shape);
  auto d = S(b, device);
  return Req(b, task_id, fb::CreateTensorCreate(b, dtype, sh, d));
}
std::vector<uint8_t> TensorFree(uint64_t task_id, uint64_t tensor) {
  FlatBufferBuilder b;
  fb::TensorHandle h(tensor);
  return Req(b, task_id, fb::CreateTensorFree(b, &h));
}
std::vector<uint8_t> TensorWrite(uint64_t task_id, uint64_t tensor, uint64_t offset,
                                 uint64_t bulk_bytes) {
  FlatBufferBuilder b;
  fb::TensorHandle h(tensor);
  return Req(b, task_id, fb::CreateTensorWrite(b, &h, offset), bulk_bytes);
}
std::vector<uint8_t> TensorRead(uint64_t task_id, uint64_t tensor, uint64_t offset,
                                uint64_t length) {
  FlatBufferBuilder b;
  fb::TensorHandle h(tensor);
  return Req(b, task_id, fb::CreateTensorRead(b, &h, offset, length));
}
std::vector<uint8_t> TensorCopy(uint64_t task_id, uint64_t src, uint64_t dst) {
  FlatBufferBuilder b;
  fb::TensorHandle s(src), d(dst);
  return Req(b, task_id, fb::CreateTensorCopy(b, &s, &d));
}
std::vector<uint8_t> TensorView(uint64_t task_id, uint64_t base, std::span<const int64_t> shape,
                                std::span<const int64_t> strides, int64_t element_offset) {
  FlatBufferBuilder b;
  fb::TensorHandle h(base);
  auto sh = Longs(b, shape);
  auto st = Longs(b, strides);
  return Req(b, task_id, fb::CreateTensorView(b, &h, sh, st, element_offset));
}
std::vector<uint8_t> TensorName(uint64_t task_id, uint64_t tensor, std::string_view name) {
  FlatBufferBuilder b;
  fb::TensorHandle h(tensor);
  auto n = S(b, name);
  return Req(b, task_id, fb::CreateTensorName(b, &h, n));
}
std::vector<uint8_t> TensorOpen(uint64_t task_id, std::string_view name) {
  FlatBufferBuilder b;
  auto n = S(b, name);
  return Req(b, task_id, fb::CreateTensorOpen(b, n));
}
std::vector<uint8_t> TensorUnname(uint64_t task_id, std::string_view name) {
  FlatBufferBuilder b;
  auto n = S(b, name);
  return Req(b, task_id, fb::CreateTensorUnname(b, n));
}
std::vector<uint8_t> Invoke(uint64_t task_id, const OpCall& call) {
  FlatBufferBuilder b;
  return Req(b, task_id, BuildInvoke(b, call));
}
std::vector<uint8_t> Submit(uint64_t task_id, std::span<const OpCall> program) {
  FlatBufferBuilder b;
  std::vector<Offset<fb::Invoke>> ops;
  for (const OpCall& c : program) ops.push_back(BuildInvoke(b, c));
  auto v = b.CreateVector(ops);
  return Req(b, task_id, fb::CreateSubmit(b, v));
}
std::vector<uint8_t> Cancel(uint64_t task_id, uint64_t target_task_id) {
  FlatBufferBuilder b;
  return Req(b, task_id, fb::CreateCancel(b, target_task_id));
}
std::vector<uint8_t> Stats(uint64_t task_id) {
  FlatBufferBuilder b;
  return Req(b, task_id, fb::CreateStats(b));
}
}  // namespace request

namespace reply {
std::vector<uint8_t> Error(uint64_t task_id, dx_status_t code, std::string_view message) {
  FlatBufferBuilder b;
  auto m = S(b, message);
  return Done(b, fb::CreateReply(b, task_id, static_cast<fb::Status>(code), m));
}
std::vector<uint8_t> Ok(uint64_t task_id, uint64_t bulk_bytes) {
  FlatBufferBuilder b;
  return Done(b, fb::CreateReply(b, task_id, fb::Status::OK, 0, fb::ReplyBody::NONE, 0,
                                 bulk_bytes));
}
std::vector<uint8_t> Hello(uint64_t task_id, std::string_view server_name, uint16_t major,
                           uint16_t minor, uint64_t session_token, bool resumed) {
  FlatBufferBuilder b;
  auto n = S(b, server_name);
  return Rep(b, task_id, DX_OK, {},
             fb::CreateHelloReply(b, major, minor, n, session_token, resumed));
}
std::vector<uint8_t> PluginList(uint64_t task_id, std::span<const PluginEntry> plugins) {
  FlatBufferBuilder b;
  std::vector<Offset<fb::PluginInfo>> v;
  for (const auto& p : plugins)
    v.push_back(fb::CreatePluginInfo(b, S(b, p.name), S(b, p.version), p.certified));
  auto vec = b.CreateVector(v);
  return Rep(b, task_id, DX_OK, {}, fb::CreatePluginList(b, vec));
}
std::vector<uint8_t> OpList(uint64_t task_id, std::span<const std::string> ops) {
  FlatBufferBuilder b;
  std::vector<Offset<flatbuffers::String>> v;
  for (const auto& o : ops) v.push_back(S(b, o));
  auto vec = b.CreateVector(v);
  return Rep(b, task_id, DX_OK, {}, fb::CreateOpList(b, vec));
}
std::vector<uint8_t> DeviceList(uint64_t task_id, std::span<const DeviceEntry> devices) {
  FlatBufferBuilder b;
  std::vector<Offset<fb::DeviceInfo>> v;
  for (const auto& d : devices)
    v.push_back(fb::CreateDeviceInfo(b, S(b, d.name), S(b, d.plugin), S(b, d.kind)));
  auto vec = b.CreateVector(v);
  return Rep(b, task_id, DX_OK, {}, fb::CreateDeviceList(b, vec));
}
std::vector<uint8_t> KernelList(uint64_t task_id, std::span<const KernelEntry> kernels) {
  FlatBufferBuilder b;
  std::vector<Offset<fb::KernelInfo>> v;
  for (const auto& k : kernels) {
    auto op = S(b, k.op);
    auto plugin = S(b, k.plugin);
    auto device = S(b, k.device);
    auto dtypes = b.CreateVector(k.dtypes);
    v.push_back(fb::CreateKernelInfo(b, op, plugin, device, dtypes, k.certified));
  }
  auto vec = b.CreateVector(v);
  return Rep(b, task_id, DX_OK, {}, fb::CreateKernelList(b, vec));
}
std::vector<uint8_t> TensorInfo(uint64_t task_id, const TensorDesc& t) {
  FlatBufferBuilder b;
  fb::TensorHandle h(t.tensor);
  auto sh = Longs(b, t.shape);
  auto st = Longs(b, t.strides);
  auto d = S(b, t.device);
  return Rep(b, task_id, DX_OK, {}, fb::CreateTensorInfo(b, &h, t.dtype, sh, st, d));
}
std::vector<uint8_t> SubmitResult(uint64_t task_id, dx_status_t code, std::string_view message,
                                  uint32_t ops_completed) {
  FlatBufferBuilder b;
  return Rep(b, task_id, code, message, fb::CreateSubmitResult(b, ops_completed));
}
std::vector<uint8_t> Stats(uint64_t task_id, const StatsDesc& s) {
  FlatBufferBuilder b;
  return Rep(b, task_id, DX_OK, {},
             fb::CreateStatsReply(b, s.tensors, s.bytes_allocated, s.tasks_completed,
                                  s.tasks_failed, s.protocol_errors));
}
}  // namespace reply

}  // namespace deepx::wire
