// libFuzzer target of deepx::wire: the frame reader, the verifier and the session together, as
// the daemon (server role) and a client (client role) read a byte stream.
//
// Input: byte 0 picks the role (bit 0: 0 server, 1 client) and the chunk size the stream is fed
// in (bits 1..7, plus 1: 1..128 bytes); the rest is the stream. Limits are small so that the caps
// are reached (header frames 4096 bytes, bulk frames 256, bulk per message 4096).
//
// Besides ASan/UBSan, it checks (and aborts when wrong): feeding in chunks gives exactly the
// events of feeding at once; nothing comes after a fatal event; every message delivered
// verifies again, touches no byte outside its header (every field is read), carries as many bulk
// bytes as its header announced, and encodes again into frames that decode to the same message.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "deepx/wire/wire.h"

namespace dw = deepx::wire;
namespace fb = deepx::wire::fb;

namespace {

[[noreturn]] void Wrong(const char* what) {
  std::fprintf(stderr, "fuzz_wire: %s\n", what);
  std::abort();
}

dw::Limits FuzzLimits() {
  dw::Limits l;
  l.max_header_bytes = 4096;
  l.max_bulk_frame_bytes = 256;
  l.max_bulk_bytes = 4096;
  return l;
}

size_t Touch(const flatbuffers::String* s) {
  size_t h = 0;
  if (s)
    for (char c : s->string_view()) h += static_cast<unsigned char>(c);
  return h;
}
template <typename V>
size_t TouchScalars(const V* v) {
  size_t h = 0;
  if (v)
    for (auto x : *v) h += static_cast<size_t>(x);
  return h;
}
size_t TouchInvoke(const fb::Invoke* i) {
  size_t h = Touch(i->op()) + Touch(i->plugin());
  if (i->inputs())
    for (auto* t : *i->inputs()) h += t->value();
  if (i->outputs())
    for (auto* t : *i->outputs()) h += t->value();
  if (i->attrs())
    for (auto* a : *i->attrs())
      h += Touch(a->name()) + Touch(a->s()) + TouchScalars(a->ints()) +
           static_cast<size_t>(a->floats() ? a->floats()->size() : 0);
  return h;
}
size_t TouchRequest(const fb::Request* r) {
  size_t h = r->task_id();
  if (auto* m = r->body_as_Hello()) h += m->major() + Touch(m->client_name());
  if (auto* m = r->body_as_ListKernels()) h += Touch(m->op()) + Touch(m->plugin());
  if (auto* m = r->body_as_TensorCreate()) h += TouchScalars(m->shape()) + Touch(m->device());
  if (auto* m = r->body_as_TensorView())
    h += m->base()->value() + TouchScalars(m->shape()) + TouchScalars(m->strides());
  if (auto* m = r->body_as_TensorName()) h += m->tensor()->value() + Touch(m->name());
  if (auto* m = r->body_as_TensorOpen()) h += Touch(m->name());
  if (auto* m = r->body_as_TensorUnname()) h += Touch(m->name());
  if (auto* m = r->body_as_TensorCopy()) h += m->src()->value() + m->dst()->value();
  if (auto* m = r->body_as_Invoke()) h += TouchInvoke(m);
  if (auto* m = r->body_as_Submit())
    for (auto* i : *m->ops()) h += TouchInvoke(i);
  return h;
}
size_t TouchReply(const fb::Reply* r) {
  size_t h = r->task_id() + Touch(r->message());
  if (auto* m = r->body_as_HelloReply()) h += Touch(m->server_name());
  if (auto* m = r->body_as_PluginList(); m && m->plugins())
    for (auto* p : *m->plugins()) h += Touch(p->name()) + Touch(p->version());
  if (auto* m = r->body_as_OpList(); m && m->ops())
    for (auto* s : *m->ops()) h += Touch(s);
  if (auto* m = r->body_as_DeviceList(); m && m->devices())
    for (auto* d : *m->devices()) h += Touch(d->name()) + Touch(d->plugin()) + Touch(d->kind());
  if (auto* m = r->body_as_KernelList(); m && m->kernels())
    for (auto* k : *m->kernels()) h += Touch(k->op()) + TouchScalars(k->dtypes());
  if (auto* m = r->body_as_TensorInfo())
    h += m->tensor()->value() + TouchScalars(m->shape()) + TouchScalars(m->strides());
  return h;
}

bool SameEvents(const std::vector<dw::Event>& a, const std::vector<dw::Event>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].kind != b[i].kind || a[i].task_id != b[i].task_id || a[i].fatal != b[i].fatal ||
        a[i].error.code != b[i].error.code || a[i].message.header != b[i].message.header ||
        a[i].message.bulk != b[i].message.bulk)
      return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const dw::Role role = (data[0] & 1) ? dw::Role::kClient : dw::Role::kServer;
  const size_t chunk = static_cast<size_t>(data[0] >> 1) + 1;
  std::span<const uint8_t> stream(data + 1, size - 1);
  const dw::Limits limits = FuzzLimits();

  dw::StreamDecoder whole(role, limits);
  std::vector<dw::Event> events;
  whole.Feed(stream, events);
  (void)whole.Finish();

  dw::StreamDecoder chunked(role, limits);
  std::vector<dw::Event> chunk_events;
  for (size_t at = 0; at < stream.size(); at += chunk)
    chunked.Feed(stream.subspan(at, std::min(chunk, stream.size() - at)), chunk_events);
  if (!SameEvents(events, chunk_events)) Wrong("chunked feeding gave other events");
  if (whole.Finish().code != chunked.Finish().code) Wrong("Finish() differs by chunking");

  volatile size_t sink = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    const dw::Event& e = events[i];
    if (e.fatal && i + 1 != events.size()) Wrong("an event after a fatal one");
    if (e.kind == dw::Event::Kind::kError) {
      if (e.error.ok() || e.error.message.empty()) Wrong("an error event without an error");
      continue;
    }
    const dw::Message& m = e.message;
    std::vector<uint8_t> again;
    if (role == dw::Role::kServer) {
      if (!dw::VerifyRequest(m.header, limits).ok()) Wrong("a delivered request does not verify");
      if (m.request()->bulk_bytes() != m.bulk.size()) Wrong("request bulk size differs");
      sink = sink + TouchRequest(m.request());
      if (!dw::EncodeRequest(again, m.header, m.bulk, limits).ok()) Wrong("re-encoding failed");
    } else {
      if (!dw::VerifyReply(m.header, limits).ok()) Wrong("a delivered reply does not verify");
      if (m.reply()->bulk_bytes() != m.bulk.size()) Wrong("reply bulk size differs");
      sink = sink + TouchReply(m.reply());
      if (!dw::EncodeReply(again, m.header, m.bulk, limits).ok()) Wrong("re-encoding failed");
    }
    // The re-encoded message reads back the same, on a fresh reader (framing and verification;
    // the session's ordering rules are not part of this check).
    dw::FrameReader reader(limits);
    if (!reader.Feed(again).ok() || !reader.Finish().ok()) Wrong("re-encoded frames refused");
    dw::Frame f;
    std::vector<uint8_t> header, bulk;
    while (reader.Next(f)) {
      if (f.bulk) {
        bulk.insert(bulk.end(), f.payload.begin(), f.payload.end());
      } else {
        if (!header.empty()) Wrong("two header frames from one message");
        header = f.payload;
      }
    }
    if (header != m.header || bulk != m.bulk) Wrong("re-encoded message differs");
  }
  return 0;
}
