// deepx::wire: round trips of every message, every error path of framing, verification and the
// session, and messages of a newer minor (deepx_wire_next.fbs) read by this 1.0 decoder.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "deepx/wire/wire.h"
#include "deepx_wire_next_generated.h"

namespace dw = deepx::wire;
namespace fb = deepx::wire::fb;
namespace nx = deepx::wire::next;
using Bytes = std::vector<uint8_t>;

namespace {

Bytes FrameReq(const Bytes& header, const Bytes& bulk = {}, const dw::Limits& l = {}) {
  Bytes out;
  dw::Status s = dw::EncodeRequest(out, header, bulk, l);
  EXPECT_TRUE(s.ok()) << s.message;
  return out;
}
Bytes FrameRep(const Bytes& header, const Bytes& bulk = {}, const dw::Limits& l = {}) {
  Bytes out;
  dw::Status s = dw::EncodeReply(out, header, bulk, l);
  EXPECT_TRUE(s.ok()) << s.message;
  return out;
}
Bytes RawFrame(uint32_t flags, const Bytes& payload, uint32_t length_field) {
  Bytes out = {'D', 'X', 'W', 'F'};
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(flags >> (8 * i)));
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(length_field >> (8 * i)));
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}
Bytes Cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

std::vector<dw::Event> Decode(dw::Role role, const Bytes& stream, const dw::Limits& l = {},
                              size_t chunk = 0) {
  dw::StreamDecoder d(role, l);
  std::vector<dw::Event> events;
  if (chunk == 0) {
    d.Feed(stream, events);
  } else {
    for (size_t at = 0; at < stream.size(); at += chunk)
      d.Feed(std::span<const uint8_t>(stream).subspan(at, std::min(chunk, stream.size() - at)),
             events);
  }
  return events;
}

Bytes Hello() { return FrameReq(dw::request::Hello(0, "test")); }
Bytes HelloReply() { return FrameRep(dw::reply::Hello(0, "deepxd")); }

// Decodes hello + |msg| on the server side; returns the one message after the hello.
dw::Message ServerOne(const Bytes& msg, size_t chunk = 0) {
  auto events = Decode(dw::Role::kServer, Cat({Hello(), msg}), {}, chunk);
  EXPECT_EQ(events.size(), 2u);
  if (events.size() != 2) return {};
  EXPECT_EQ(events[1].kind, dw::Event::Kind::kMessage) << events[1].error.message;
  return std::move(events[1].message);
}
dw::Message ClientOne(const Bytes& msg) {
  auto events = Decode(dw::Role::kClient, Cat({HelloReply(), msg}));
  EXPECT_EQ(events.size(), 2u);
  if (events.size() != 2) return {};
  EXPECT_EQ(events[1].kind, dw::Event::Kind::kMessage) << events[1].error.message;
  return std::move(events[1].message);
}

void ExpectError(const dw::Event& e, dx_status_t code, const std::string& needle, bool fatal) {
  EXPECT_EQ(e.kind, dw::Event::Kind::kError);
  EXPECT_EQ(e.error.code, code) << e.error.message;
  EXPECT_NE(e.error.message.find(needle), std::string::npos) << e.error.message;
  EXPECT_EQ(e.fatal, fatal) << e.error.message;
}

std::vector<int64_t> V(std::initializer_list<int64_t> v) { return v; }

}  // namespace

// ---- round trips ------------------------------------------------------------------------------

TEST(WireRoundTrip, HelloBothWays) {
  auto events = Decode(dw::Role::kServer, FrameReq(dw::request::Hello(0, "client-a", 1, 0)));
  ASSERT_EQ(events.size(), 1u);
  const fb::Hello* h = events[0].message.request()->body_as_Hello();
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->major(), 1);
  EXPECT_EQ(h->minor(), 0);
  EXPECT_EQ(h->client_name()->str(), "client-a");

  dw::StreamDecoder client(dw::Role::kClient, {});
  std::vector<dw::Event> ce;
  client.Feed(FrameRep(dw::reply::Hello(0, "deepxd-test", 1, 3)), ce);
  ASSERT_EQ(ce.size(), 1u);
  const fb::HelloReply* r = ce[0].message.reply()->body_as_HelloReply();
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->server_name()->str(), "deepxd-test");
  EXPECT_EQ(client.session().peer_minor(), 3);
  EXPECT_EQ(client.session().negotiated_minor(), dw::kProtocolMinor);
  EXPECT_TRUE(client.session().hello_done());
}

TEST(WireRoundTrip, HelloResumeTokens) {
  // A Hello without a token reads 0 (a new session); the tokens travel both ways.
  auto events = Decode(dw::Role::kServer, FrameReq(dw::request::Hello(0, "fresh")));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].message.request()->body_as_Hello()->resume_token(), 0u);
  events = Decode(dw::Role::kServer,
                  FrameReq(dw::request::Hello(0, "back", 1, 0, 0x1234567890abcdefull)));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].message.request()->body_as_Hello()->resume_token(), 0x1234567890abcdefull);

  auto ce = Decode(dw::Role::kClient, FrameRep(dw::reply::Hello(0, "d", 1, 0, 42, true)));
  ASSERT_EQ(ce.size(), 1u);
  const fb::HelloReply* r = ce[0].message.reply()->body_as_HelloReply();
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->session_token(), 42u);
  EXPECT_TRUE(r->resumed());
  ce = Decode(dw::Role::kClient, FrameRep(dw::reply::Hello(0, "d")));
  ASSERT_EQ(ce.size(), 1u);
  EXPECT_EQ(ce[0].message.reply()->body_as_HelloReply()->session_token(), 0u);
  EXPECT_FALSE(ce[0].message.reply()->body_as_HelloReply()->resumed());
}

TEST(WireRoundTrip, EveryRequest) {
  const uint64_t h1 = dw::MakeHandle(7, 3), h2 = dw::MakeHandle(9, 1);
  EXPECT_EQ(dw::HandleIndex(h1), 7u);
  EXPECT_EQ(dw::HandleGeneration(h1), 3u);
  {
    auto m = ServerOne(FrameReq(dw::request::ListPlugins(11)));
    EXPECT_EQ(m.task_id, 11u);
    EXPECT_EQ(m.request()->body_type(), fb::RequestBody::ListPlugins);
  }
  EXPECT_EQ(ServerOne(FrameReq(dw::request::ListOps(12))).request()->body_type(),
            fb::RequestBody::ListOps);
  EXPECT_EQ(ServerOne(FrameReq(dw::request::ListDevices(13))).request()->body_type(),
            fb::RequestBody::ListDevices);
  {
    auto m = ServerOne(FrameReq(dw::request::ListKernels(14, "dx.add", "cpu")));
    auto* k = m.request()->body_as_ListKernels();
    ASSERT_NE(k, nullptr);
    EXPECT_EQ(k->op()->str(), "dx.add");
    EXPECT_EQ(k->plugin()->str(), "cpu");
  }
  {
    auto shape = V({2, 3, 0});
    auto m = ServerOne(FrameReq(dw::request::TensorCreate(15, 73730, shape, "cpu:0")));
    auto* c = m.request()->body_as_TensorCreate();
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->dtype(), 73730u);
    EXPECT_EQ(std::vector<int64_t>(c->shape()->begin(), c->shape()->end()), shape);
    EXPECT_EQ(c->device()->str(), "cpu:0");
  }
  EXPECT_EQ(ServerOne(FrameReq(dw::request::TensorFree(16, h1)))
                .request()->body_as_TensorFree()->tensor()->value(),
            h1);
  {
    Bytes data(1000);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7);
    auto m = ServerOne(FrameReq(dw::request::TensorWrite(17, h1, 40, data.size()), data));
    auto* w = m.request()->body_as_TensorWrite();
    ASSERT_NE(w, nullptr);
    EXPECT_EQ(w->tensor()->value(), h1);
    EXPECT_EQ(w->offset(), 40u);
    EXPECT_EQ(m.request()->bulk_bytes(), 1000u);
    EXPECT_EQ(m.bulk, data);
  }
  {
    auto m = ServerOne(FrameReq(dw::request::TensorRead(18, h2, 8, 64)));
    auto* r = m.request()->body_as_TensorRead();
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->tensor()->value(), h2);
    EXPECT_EQ(r->offset(), 8u);
    EXPECT_EQ(r->length(), 64u);
  }
  {
    auto m = ServerOne(FrameReq(dw::request::TensorCopy(19, h1, h2)));
    auto* c = m.request()->body_as_TensorCopy();
    EXPECT_EQ(c->src()->value(), h1);
    EXPECT_EQ(c->dst()->value(), h2);
  }
  {
    auto shape = V({4, 5}), strides = V({1, 4});
    auto m = ServerOne(FrameReq(dw::request::TensorView(20, h1, shape, strides, 3)));
    auto* v = m.request()->body_as_TensorView();
    ASSERT_NE(v, nullptr);
    EXPECT_EQ(v->base()->value(), h1);
    EXPECT_EQ(std::vector<int64_t>(v->strides()->begin(), v->strides()->end()), strides);
    EXPECT_EQ(v->element_offset(), 3);
  }
  {
    auto m = ServerOne(FrameReq(dw::request::TensorName(21, h1, "weights")));
    EXPECT_EQ(m.request()->body_as_TensorName()->name()->str(), "weights");
    EXPECT_EQ(m.request()->body_as_TensorName()->tensor()->value(), h1);
  }
  EXPECT_EQ(ServerOne(FrameReq(dw::request::TensorOpen(22, "weights")))
                .request()->body_as_TensorOpen()->name()->str(),
            "weights");
  EXPECT_EQ(ServerOne(FrameReq(dw::request::TensorUnname(23, "weights")))
                .request()->body_as_TensorUnname()->name()->str(),
            "weights");
  dw::OpCall call;
  call.op = "dx.sum";
  call.inputs = {h1, 0};
  call.outputs = {h2};
  call.plugin = "reference";
  call.backward = true;
  dw::AttrValue axes;
  axes.name = "axes";
  axes.type = fb::AttrType::INTS;
  axes.ints = {0, -1};
  dw::AttrValue mode;
  mode.name = "mode";
  mode.type = fb::AttrType::STRING;
  mode.s = "mean";
  dw::AttrValue eps;
  eps.name = "eps";
  eps.type = fb::AttrType::FLOAT;
  eps.f = 1e-5;
  call.attrs = {axes, mode, eps};
  auto check_invoke = [&](const fb::Invoke* i) {
    ASSERT_NE(i, nullptr);
    EXPECT_EQ(i->op()->str(), "dx.sum");
    ASSERT_EQ(i->inputs()->size(), 2u);
    EXPECT_EQ(i->inputs()->Get(0)->value(), h1);
    EXPECT_EQ(i->inputs()->Get(1)->value(), 0u);
    EXPECT_EQ(i->outputs()->Get(0)->value(), h2);
    EXPECT_EQ(i->plugin()->str(), "reference");
    EXPECT_TRUE(i->backward());
    ASSERT_EQ(i->attrs()->size(), 3u);
    EXPECT_EQ(i->attrs()->Get(0)->name()->str(), "axes");
    EXPECT_EQ(i->attrs()->Get(0)->type(), fb::AttrType::INTS);
    EXPECT_EQ(i->attrs()->Get(0)->ints()->Get(1), -1);
    EXPECT_EQ(i->attrs()->Get(1)->s()->str(), "mean");
    EXPECT_EQ(i->attrs()->Get(2)->f(), 1e-5);
  };
  {
    auto m = ServerOne(FrameReq(dw::request::Invoke(24, call)));
    check_invoke(m.request()->body_as_Invoke());
  }
  {
    std::vector<dw::OpCall> program = {call, call, call};
    program[2].op = "dx.add";
    program[2].attrs.clear();
    auto m = ServerOne(FrameReq(dw::request::Submit(25, program)));
    auto* s = m.request()->body_as_Submit();
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(s->ops()->size(), 3u);
    check_invoke(s->ops()->Get(0));
    EXPECT_EQ(s->ops()->Get(2)->op()->str(), "dx.add");
  }
  EXPECT_EQ(ServerOne(FrameReq(dw::request::Cancel(26, 24))).request()->body_as_Cancel()->task_id(),
            24u);
  EXPECT_EQ(ServerOne(FrameReq(dw::request::Stats(27))).request()->body_type(),
            fb::RequestBody::Stats);
}

TEST(WireRoundTrip, EveryReply) {
  {
    auto m = ClientOne(FrameRep(dw::reply::Error(5, DX_NOT_FOUND, "no op dx.frob")));
    EXPECT_EQ(m.task_id, 5u);
    EXPECT_EQ(m.reply()->status(), fb::Status::NOT_FOUND);
    EXPECT_EQ(m.reply()->message()->str(), "no op dx.frob");
    EXPECT_EQ(m.reply()->body_type(), fb::ReplyBody::NONE);
  }
  {
    Bytes data = {1, 2, 3, 4, 5, 6, 7, 8};
    auto m = ClientOne(FrameRep(dw::reply::Ok(6, data.size()), data));
    EXPECT_EQ(m.reply()->status(), fb::Status::OK);
    EXPECT_EQ(m.bulk, data);
  }
  {
    std::vector<dw::PluginEntry> p = {{"cpu", "1.0", true}, {"mine", "0.1", false}};
    auto m = ClientOne(FrameRep(dw::reply::PluginList(7, p)));
    auto* l = m.reply()->body_as_PluginList();
    ASSERT_NE(l, nullptr);
    ASSERT_EQ(l->plugins()->size(), 2u);
    EXPECT_EQ(l->plugins()->Get(0)->name()->str(), "cpu");
    EXPECT_TRUE(l->plugins()->Get(0)->certified());
    EXPECT_FALSE(l->plugins()->Get(1)->certified());
  }
  {
    std::vector<std::string> ops = {"dx.add", "dx.matmul"};
    auto m = ClientOne(FrameRep(dw::reply::OpList(8, ops)));
    EXPECT_EQ(m.reply()->body_as_OpList()->ops()->Get(1)->str(), "dx.matmul");
  }
  {
    std::vector<dw::DeviceEntry> d = {{"cpu:0", "cpu", "host"}};
    auto m = ClientOne(FrameRep(dw::reply::DeviceList(9, d)));
    auto* l = m.reply()->body_as_DeviceList();
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(l->devices()->Get(0)->plugin()->str(), "cpu");
    EXPECT_EQ(l->devices()->Get(0)->kind()->str(), "host");
  }
  {
    std::vector<dw::KernelEntry> k = {{"dx.add", "cpu", "cpu:0", {73730, 81922}, true}};
    auto m = ClientOne(FrameRep(dw::reply::KernelList(10, k)));
    auto* l = m.reply()->body_as_KernelList();
    ASSERT_NE(l, nullptr);
    EXPECT_EQ(l->kernels()->Get(0)->dtypes()->Get(1), 81922u);
    EXPECT_TRUE(l->kernels()->Get(0)->certified());
  }
  {
    dw::TensorDesc t{dw::MakeHandle(1, 2), 73730, {2, 3}, {3, 1}, "cpu:0"};
    auto m = ClientOne(FrameRep(dw::reply::TensorInfo(11, t)));
    auto* i = m.reply()->body_as_TensorInfo();
    ASSERT_NE(i, nullptr);
    EXPECT_EQ(i->tensor()->value(), t.tensor);
    EXPECT_EQ(i->shape()->Get(1), 3);
    EXPECT_EQ(i->strides()->Get(0), 3);
    EXPECT_EQ(i->device()->str(), "cpu:0");
  }
  {
    auto m = ClientOne(FrameRep(dw::reply::SubmitResult(12, DX_SHAPE_MISMATCH, "op 2: shapes", 2)));
    EXPECT_EQ(m.reply()->status(), fb::Status::SHAPE_MISMATCH);
    EXPECT_EQ(m.reply()->body_as_SubmitResult()->ops_completed(), 2u);
  }
  {
    dw::StatsDesc s{3, 4096, 10, 1, 2};
    auto m = ClientOne(FrameRep(dw::reply::Stats(13, s)));
    auto* r = m.reply()->body_as_StatsReply();
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->bytes_allocated(), 4096u);
    EXPECT_EQ(r->protocol_errors(), 2u);
  }
}

TEST(WireRoundTrip, ByteByByteAndOddChunksGiveTheSameMessages) {
  Bytes data(300, 0xab);
  Bytes stream = Cat({Hello(), FrameReq(dw::request::ListOps(1)),
                      FrameReq(dw::request::TensorWrite(2, dw::MakeHandle(1, 1), 0, data.size()),
                               data),
                      FrameReq(dw::request::Stats(3))});
  for (size_t chunk : {size_t{1}, size_t{3}, size_t{13}, size_t{0}}) {
    auto events = Decode(dw::Role::kServer, stream, {}, chunk);
    ASSERT_EQ(events.size(), 4u) << "chunk " << chunk;
    for (const auto& e : events) EXPECT_EQ(e.kind, dw::Event::Kind::kMessage);
    EXPECT_EQ(events[1].task_id, 1u);
    EXPECT_EQ(events[2].message.bulk, data);
    EXPECT_EQ(events[3].task_id, 3u);
  }
}

TEST(WireRoundTrip, BulkSplitIntoFramesOfTheConfiguredSize) {
  dw::Limits l;
  l.max_bulk_frame_bytes = 64;
  Bytes data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i);
  Bytes msg = FrameReq(dw::request::TensorWrite(4, dw::MakeHandle(1, 1), 0, data.size()), data, l);
  // Count the bulk frames: ceil(1000 / 64) = 16.
  dw::FrameReader reader(l);
  ASSERT_TRUE(reader.Feed(msg).ok());
  dw::Frame f;
  int header = 0, bulk = 0;
  while (reader.Next(f)) {
    (f.bulk ? bulk : header)++;
    if (f.bulk) {
      EXPECT_LE(f.payload.size(), 64u);
    }
  }
  EXPECT_EQ(header, 1);
  EXPECT_EQ(bulk, 16);
  auto events = Decode(dw::Role::kServer, Cat({Hello(), msg}), l, 7);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].message.bulk, data);
}

// ---- streaming bulk: in place, scatter-gather -------------------------------------------------

// Receives |stream| the way deepxd and the remote client do: whenever a bulk frame's payload is
// open, up to |chunk| bytes go straight into BulkWindow() (CommitBulk), the rest through Feed.
std::vector<dw::Event> DecodeInPlace(dw::Role role, const Bytes& stream, const dw::Limits& l,
                                     size_t chunk) {
  dw::StreamDecoder d(role, l);
  std::vector<dw::Event> events;
  size_t at = 0;
  while (at < stream.size() && !d.closed()) {
    std::span<uint8_t> w = d.BulkWindow();
    size_t n = std::min(chunk, stream.size() - at);
    if (!w.empty()) {
      n = std::min(n, w.size());
      std::memcpy(w.data(), stream.data() + at, n);
      d.CommitBulk(n, events);
    } else {
      d.Feed(std::span<const uint8_t>(stream).subspan(at, n), events);
    }
    at += n;
  }
  return events;
}

TEST(WireStream, BulkReceivedInPlaceEqualsFedBulkForSizesNotAMultipleOfTheFrameCap) {
  dw::Limits l;
  l.max_bulk_frame_bytes = 64;
  for (size_t size : {size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{1000}}) {
    Bytes data(size);
    for (size_t i = 0; i < size; ++i) data[i] = static_cast<uint8_t>(i * 7 + size);
    Bytes stream = Cat({Hello(),
                        FrameReq(dw::request::TensorWrite(5, dw::MakeHandle(1, 1), 3, size),
                                 data, l),
                        FrameReq(dw::request::Stats(6), {}, l)});
    for (size_t chunk : {size_t{1}, size_t{5}, size_t{64}, size_t{100}, size_t{1u << 20}}) {
      auto events = DecodeInPlace(dw::Role::kServer, stream, l, chunk);
      ASSERT_EQ(events.size(), 3u) << "size " << size << " chunk " << chunk;
      ASSERT_EQ(events[1].kind, dw::Event::Kind::kMessage) << events[1].error.message;
      EXPECT_EQ(events[1].message.bulk, data) << "size " << size << " chunk " << chunk;
      EXPECT_EQ(events[1].message.request()->body_as_TensorWrite()->offset(), 3u);
      EXPECT_EQ(events[2].task_id, 6u);
    }
  }
}

TEST(WireStream, NoWindowOutsideABulkPayloadOrForASkippedMessage) {
  dw::StreamDecoder d(dw::Role::kServer, {});
  std::vector<dw::Event> events;
  EXPECT_TRUE(d.BulkWindow().empty());
  // Before Hello: refused, its bulk skipped: nothing to receive in place.
  Bytes data(100, 1);
  Bytes msg = FrameReq(dw::request::TensorWrite(1, dw::MakeHandle(1, 1), 0, data.size()), data);
  d.Feed(std::span<const uint8_t>(msg).first(dw::kFrameHeaderBytes * 2 + 1), events);
  EXPECT_TRUE(d.BulkWindow().empty());
  d.Feed(std::span<const uint8_t>(msg).subspan(dw::kFrameHeaderBytes * 2 + 1), events);
  ASSERT_EQ(events.size(), 1u);
  ExpectError(events[0], DX_FAILED_PRECONDITION, "must be Hello", false);
  // After Hello: the window is the rest of the open frame.
  events.clear();
  d.Feed(Hello(), events);
  size_t head = msg.size() - data.size();
  d.Feed(std::span<const uint8_t>(msg).first(head + 10), events);
  ASSERT_EQ(d.BulkWindow().size(), 90u);
  std::memcpy(d.BulkWindow().data(), data.data() + 10, 90);
  d.CommitBulk(90, events);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].message.bulk, data);
  EXPECT_TRUE(d.BulkWindow().empty());
}

TEST(WireStream, BulkEndingEarlyIsAnErrorAtEndOfStreamAndAHeaderInsteadIsFatal) {
  dw::Limits l;
  l.max_bulk_frame_bytes = 64;
  Bytes data(200, 9);
  Bytes msg = FrameReq(dw::request::TensorWrite(7, dw::MakeHandle(1, 1), 0, data.size()), data, l);
  // Cut inside the second bulk frame.
  Bytes cut(msg.begin(), msg.end() - 100);
  dw::StreamDecoder d(dw::Role::kServer, l);
  std::vector<dw::Event> events;
  d.Feed(Cat({Hello(), cut}), events);
  ASSERT_EQ(events.size(), 1u);
  dw::Status fin = d.Finish();
  EXPECT_EQ(fin.code, DX_IO_ERROR) << fin.message;
  // A header frame where bulk bytes are due: fatal, naming the task.
  const size_t head = msg.size() - (data.size() + 4 * dw::kFrameHeaderBytes);  // 4 bulk frames
  Bytes upto_first_bulk(msg.begin(), msg.begin() + head + dw::kFrameHeaderBytes + 64);
  auto ev = Decode(dw::Role::kServer,
                   Cat({Hello(), upto_first_bulk, FrameReq(dw::request::Stats(8), {}, l)}), l);
  ASSERT_EQ(ev.size(), 2u);
  ExpectError(ev[1], DX_INVALID_ARGUMENT, "still expected", true);
}

TEST(WireStream, BulkDestinationTakesTheMatchingReplyOnly) {
  dw::Limits l;
  l.max_bulk_frame_bytes = 64;
  Bytes data(150);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i + 1);
  for (size_t chunk : {size_t{1}, size_t{50}, size_t{4096}}) {
    dw::StreamDecoder d(dw::Role::kClient, l);
    std::vector<dw::Event> events;
    d.Feed(HelloReply(), events);
    Bytes dst(150, 0), small(149, 0);
    // Another task's reply first: not into the destination.
    d.SetBulkDestination(9, dst);
    Bytes stream = Cat({FrameRep(dw::reply::Ok(8, data.size()), data, l),
                        FrameRep(dw::reply::Ok(9, data.size()), data, l),
                        FrameRep(dw::reply::Ok(10, data.size()), data, l)});
    for (size_t at = 0; at < stream.size();) {
      std::span<uint8_t> w = d.BulkWindow();
      size_t n = std::min(chunk, stream.size() - at);
      if (!w.empty()) {
        n = std::min(n, w.size());
        std::memcpy(w.data(), stream.data() + at, n);
        d.CommitBulk(n, events);
      } else {
        d.Feed(std::span<const uint8_t>(stream).subspan(at, n), events);
      }
      at += n;
    }
    ASSERT_EQ(events.size(), 4u);
    EXPECT_FALSE(events[1].message.bulk_in_destination);
    EXPECT_EQ(events[1].message.bulk, data);
    EXPECT_TRUE(events[2].message.bulk_in_destination);
    EXPECT_TRUE(events[2].message.bulk.empty());
    EXPECT_EQ(dst, data);
    // One message only: task 10 (and any later one) gets its own buffer.
    EXPECT_FALSE(events[3].message.bulk_in_destination);
    EXPECT_EQ(events[3].message.bulk, data);
    // A size that does not match: the usual buffer.
    events.clear();
    d.SetBulkDestination(11, small);
    d.Feed(FrameRep(dw::reply::Ok(11, data.size()), data, l), events);
    ASSERT_EQ(events.size(), 1u);
    EXPECT_FALSE(events[0].message.bulk_in_destination);
    EXPECT_EQ(events[0].message.bulk, data);
    EXPECT_EQ(small, Bytes(149, 0));
    // Withdrawn while its bytes arrive: the rest is skipped, the message is an error.
    events.clear();
    Bytes dst2(150, 0);
    d.SetBulkDestination(12, dst2);
    Bytes msg = FrameRep(dw::reply::Ok(12, data.size()), data, l);
    d.Feed(std::span<const uint8_t>(msg).first(msg.size() - 100), events);
    d.ClearBulkDestination();
    d.Feed(std::span<const uint8_t>(msg).subspan(msg.size() - 100), events);
    ASSERT_EQ(events.size(), 1u);
    ExpectError(events[0], DX_CANCELLED, "withdrawn", false);
    events.clear();
    d.Feed(FrameRep(dw::reply::Ok(13)), events);
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0].kind, dw::Event::Kind::kMessage);
  }
}

TEST(WireStream, ScatterGatherHeaderAndFrameHeadersMatchEncodeReply) {
  dw::Limits l;
  l.max_bulk_frame_bytes = 64;
  for (size_t size : {size_t{1}, size_t{64}, size_t{130}}) {
    Bytes data(size, 0x5a);
    Bytes header = dw::reply::Ok(3, size);
    Bytes want = FrameRep(header, data, l);
    Bytes got;
    ASSERT_TRUE(dw::EncodeReplyHeader(got, header, size, l).ok());
    ASSERT_EQ(dw::BulkFrameCount(size, l), (size + 63) / 64);
    for (size_t at = 0; at < size; at += 64) {
      size_t n = std::min<size_t>(64, size - at);
      uint8_t h[dw::kFrameHeaderBytes];
      dw::WriteFrameHeader(h, true, static_cast<uint32_t>(n));
      got.insert(got.end(), h, h + sizeof h);
      got.insert(got.end(), data.begin() + at, data.begin() + at + n);
    }
    EXPECT_EQ(got, want) << size;
  }
  Bytes out;
  EXPECT_EQ(dw::EncodeReplyHeader(out, dw::reply::Ok(3, 10), 11, l).code, DX_INVALID_ARGUMENT);
  EXPECT_EQ(dw::EncodeRequestHeader(out, dw::request::TensorWrite(1, 1, 0, 10), 9, l).code,
            DX_INVALID_ARGUMENT);
  EXPECT_TRUE(out.empty());
  l.max_bulk_bytes = 8;
  EXPECT_EQ(dw::EncodeRequestHeader(out, dw::request::TensorWrite(1, 1, 0, 10), 10, l).code,
            DX_RESOURCE_EXHAUSTED);
  EXPECT_TRUE(out.empty());
}

// ---- framing errors ---------------------------------------------------------------------------

TEST(WireFrame, BadMagicIsFatalAtTheFirstWrongByte) {
  dw::FrameReader r({});
  dw::Status s = r.Feed(Bytes{'D', 'X', 'Q'});
  EXPECT_EQ(s.code, DX_INVALID_ARGUMENT);
  EXPECT_NE(s.message.find("bad frame magic at stream offset 2"), std::string::npos) << s.message;
  EXPECT_TRUE(r.failed());
  EXPECT_FALSE(r.Feed(Hello()).ok()) << "the error is sticky";

  Bytes stream = Cat({Hello(), Bytes{'G', 'E', 'T', ' ', '/'}});
  auto events = Decode(dw::Role::kServer, stream, {}, 1);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, dw::Event::Kind::kMessage);
  ExpectError(events[1], DX_INVALID_ARGUMENT, "bad frame magic", true);
}

TEST(WireFrame, ReservedFlagsAndEmptyFramesAreRefused) {
  auto e1 = Decode(dw::Role::kServer, RawFrame(0x2, {1, 2, 3}, 3));
  ASSERT_EQ(e1.size(), 1u);
  ExpectError(e1[0], DX_INVALID_ARGUMENT, "reserved flag bits", true);
  auto e2 = Decode(dw::Role::kServer, RawFrame(0, {}, 0));
  ASSERT_EQ(e2.size(), 1u);
  ExpectError(e2[0], DX_INVALID_ARGUMENT, "empty frame", true);
}

TEST(WireFrame, OversizedFramesAreRefusedBeforeTheirPayload) {
  dw::Limits l;
  l.max_header_bytes = 128;
  l.max_bulk_frame_bytes = 16;
  // Only the 12 header bytes are fed: the length alone is refused.
  auto e1 = Decode(dw::Role::kServer, RawFrame(0, {}, 129), l);
  ASSERT_EQ(e1.size(), 1u);
  ExpectError(e1[0], DX_RESOURCE_EXHAUSTED, "header frame at stream offset 0 announces 129", true);
  auto e2 = Decode(dw::Role::kServer, RawFrame(1, {}, 0xffffffffu), l);
  ASSERT_EQ(e2.size(), 1u);
  ExpectError(e2[0], DX_RESOURCE_EXHAUSTED, "bulk frame", true);
  // The writer refuses too.
  Bytes out;
  EXPECT_EQ(dw::AppendFrame(out, false, Bytes(129, 0), l).code, DX_OUT_OF_RANGE);
  EXPECT_EQ(dw::AppendFrame(out, true, Bytes{}, l).code, DX_INVALID_ARGUMENT);
  EXPECT_TRUE(out.empty());
}

TEST(WireFrame, TruncatedAtEndOfStream) {
  Bytes msg = FrameReq(dw::request::ListOps(1));
  {
    dw::StreamDecoder d(dw::Role::kServer, {});
    std::vector<dw::Event> ev;
    d.Feed(std::span<const uint8_t>(msg).first(5), ev);
    EXPECT_TRUE(ev.empty());
    dw::Status s = d.Finish();
    EXPECT_EQ(s.code, DX_IO_ERROR);
    EXPECT_NE(s.message.find("inside a frame header: 5 of 12"), std::string::npos) << s.message;
  }
  {
    dw::StreamDecoder d(dw::Role::kServer, {});
    std::vector<dw::Event> ev;
    d.Feed(std::span<const uint8_t>(msg).first(msg.size() - 1), ev);
    EXPECT_TRUE(ev.empty());
    dw::Status s = d.Finish();
    EXPECT_EQ(s.code, DX_IO_ERROR);
    EXPECT_NE(s.message.find("1 of"), std::string::npos) << s.message;
  }
  {
    dw::StreamDecoder d(dw::Role::kServer, {});
    std::vector<dw::Event> ev;
    d.Feed(Hello(), ev);
    EXPECT_TRUE(d.Finish().ok());
  }
}

// ---- verification -----------------------------------------------------------------------------

TEST(WireVerify, MalformedFlatBufferIsFatal) {
  // Framed correctly, but not a FlatBuffer of this protocol: garbage, then the right identifier
  // with offsets that point outside the buffer.
  Bytes garbage(40, 0xee);
  auto e1 = Decode(dw::Role::kServer, RawFrame(0, garbage, 40));
  ASSERT_EQ(e1.size(), 1u);
  ExpectError(e1[0], DX_INVALID_ARGUMENT, "identifier", true);
  Bytes bad = {0xf0, 0xff, 0xff, 0x0f, 'D', 'X', 'W', '1', 0, 0, 0, 0};
  auto e2 = Decode(dw::Role::kServer, RawFrame(0, bad, static_cast<uint32_t>(bad.size())));
  ASSERT_EQ(e2.size(), 1u);
  ExpectError(e2[0], DX_INVALID_ARGUMENT, "verification failed", true);
  auto e3 = Decode(dw::Role::kServer, RawFrame(0, {1, 2, 3}, 3));
  ASSERT_EQ(e3.size(), 1u);
  ExpectError(e3[0], DX_INVALID_ARGUMENT, "too short", true);
}

TEST(WireVerify, CorruptedVectorLengthFailsTheVerifier) {
  Bytes header = dw::request::ListKernels(3, "dx.add", "cpu");
  ASSERT_TRUE(dw::VerifyRequest(header, {}).ok());
  // Find the string "dx.add" and make its length prefix huge: framing is still fine.
  auto it = std::search(header.begin(), header.end(), std::begin("dx.add"), std::end("dx.add") - 1);
  ASSERT_NE(it, header.end());
  size_t at = static_cast<size_t>(it - header.begin()) - 4;
  header[at + 3] = 0x7f;
  dw::Status s = dw::VerifyRequest(header, {});
  EXPECT_EQ(s.code, DX_INVALID_ARGUMENT);
  auto events = Decode(dw::Role::kServer,
                       Cat({Hello(), RawFrame(0, header, static_cast<uint32_t>(header.size()))}));
  ASSERT_EQ(events.size(), 2u);
  ExpectError(events[1], DX_INVALID_ARGUMENT, "verification failed", true);
}

TEST(WireVerify, DepthAndTableCapsFromTheLimits) {
  std::vector<dw::OpCall> program(50);
  for (auto& c : program) c.op = "dx.add";
  Bytes header = dw::request::Submit(9, program);
  EXPECT_TRUE(dw::VerifyRequest(header, {}).ok());
  dw::Limits few_tables;
  few_tables.max_tables = 20;
  EXPECT_EQ(dw::VerifyRequest(header, few_tables).code, DX_INVALID_ARGUMENT);
  dw::Limits shallow;
  shallow.max_depth = 2;  // Request → Submit → Invoke is deeper than that
  EXPECT_EQ(dw::VerifyRequest(header, shallow).code, DX_INVALID_ARGUMENT);
  dw::Limits few_ops;
  few_ops.max_program_ops = 10;
  dw::Status s = dw::VerifyRequest(header, few_ops);
  EXPECT_EQ(s.code, DX_OUT_OF_RANGE);
  EXPECT_NE(s.message.find("Submit.ops: 50 entries"), std::string::npos) << s.message;
}

TEST(WireVerify, FieldCapsAreAnsweredAndTheSessionGoesOn) {
  dw::Limits l;
  l.max_string_bytes = 8;
  Bytes stream = Cat({FrameReq(dw::request::Hello(0, "ok")),
                      FrameReq(dw::request::TensorOpen(4, "a-very-long-name")),
                      FrameReq(dw::request::TensorCreate(5, 1, V({1, 2, 3, 4, 5}), "cpu")),
                      FrameReq(dw::request::TensorCreate(6, 1, V({-1}), "cpu")),
                      FrameReq(dw::request::TensorView(7, 1, V({2, 2}), V({1}), 0)),
                      FrameReq(dw::request::Submit(8, {})),
                      FrameReq(dw::request::ListOps(9))});
  l.max_rank = 4;
  auto events = Decode(dw::Role::kServer, stream, l);
  ASSERT_EQ(events.size(), 7u);
  ExpectError(events[1], DX_OUT_OF_RANGE, "TensorOpen.name: 16 bytes", false);
  EXPECT_EQ(events[1].task_id, 4u);
  ExpectError(events[2], DX_OUT_OF_RANGE, "TensorCreate.shape: 5 entries", false);
  ExpectError(events[3], DX_INVALID_ARGUMENT, "negative extent -1", false);
  ExpectError(events[4], DX_INVALID_ARGUMENT, "1 strides for a shape of rank 2", false);
  ExpectError(events[5], DX_INVALID_ARGUMENT, "Submit: an empty program", false);
  EXPECT_EQ(events[6].kind, dw::Event::Kind::kMessage);
  EXPECT_EQ(events[6].task_id, 9u);
}

TEST(WireVerify, ARequestWithoutBodyOrHandleIsRefused) {
  flatbuffers::FlatBufferBuilder b;
  b.Finish(fb::CreateRequest(b, 3), fb::RequestIdentifier());
  Bytes none(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
  flatbuffers::FlatBufferBuilder b2;
  b2.Finish(fb::CreateRequest(b2, 4, fb::RequestBody::TensorFree, fb::CreateTensorFree(b2).Union()),
            fb::RequestIdentifier());
  Bytes nohandle(b2.GetBufferPointer(), b2.GetBufferPointer() + b2.GetSize());
  // A body type without its table (found by fuzz_wire): the accessors would return null.
  flatbuffers::FlatBufferBuilder b3;
  b3.Finish(fb::CreateRequest(b3, 5, fb::RequestBody::Submit), fb::RequestIdentifier());
  Bytes typeonly(b3.GetBufferPointer(), b3.GetBufferPointer() + b3.GetSize());
  auto events = Decode(dw::Role::kServer, Cat({Hello(), FrameReq(none), FrameReq(nohandle),
                                               RawFrame(0, typeonly, static_cast<uint32_t>(
                                                                         typeonly.size()))}));
  ASSERT_EQ(events.size(), 4u);
  ExpectError(events[1], DX_INVALID_ARGUMENT, "no body", false);
  ExpectError(events[2], DX_INVALID_ARGUMENT, "TensorFree.tensor is missing", false);
  ExpectError(events[3], DX_INVALID_ARGUMENT, "the request's body (type 16) is missing", false);

  flatbuffers::FlatBufferBuilder b4;
  b4.Finish(fb::CreateReply(b4, 6, fb::Status::OK, 0, fb::ReplyBody::PluginList),
            fb::RequestIdentifier());
  Bytes reply(b4.GetBufferPointer(), b4.GetBufferPointer() + b4.GetSize());
  auto ce = Decode(dw::Role::kClient,
                   Cat({HelloReply(), RawFrame(0, reply, static_cast<uint32_t>(reply.size()))}));
  ASSERT_EQ(ce.size(), 2u);
  ExpectError(ce[1], DX_INVALID_ARGUMENT, "the reply's body (type 2) is missing", true);
}

// ---- versions ---------------------------------------------------------------------------------

TEST(WireVersion, AnotherMajorIsRefusedBothWays) {
  auto events = Decode(dw::Role::kServer, Cat({FrameReq(dw::request::Hello(0, "future", 2, 0)),
                                               FrameReq(dw::request::ListOps(1))}));
  ASSERT_EQ(events.size(), 1u) << "nothing is read after the refusal";
  ExpectError(events[0], DX_VERSION_MISMATCH, "protocol major 2.0 refused: this daemon speaks 1.0",
              true);

  auto ce = Decode(dw::Role::kClient, FrameRep(dw::reply::Hello(0, "old", 0, 9)));
  ASSERT_EQ(ce.size(), 1u);
  ExpectError(ce[0], DX_VERSION_MISMATCH, "the daemon speaks protocol 0.9", true);

  // The daemon's refusal, as the client reads it.
  auto ce2 = Decode(dw::Role::kClient,
                    FrameRep(dw::reply::Error(0, DX_VERSION_MISMATCH, "major 2 refused")));
  ASSERT_EQ(ce2.size(), 1u);
  ExpectError(ce2[0], DX_VERSION_MISMATCH, "the daemon refused the Hello: major 2 refused", true);
}

TEST(WireVersion, NextMinorHelloAndFieldsAreReadByThisMinor) {
  flatbuffers::FlatBufferBuilder b;
  auto name = b.CreateString("client-1.1");
  auto feats = b.CreateVectorOfStrings({"frobnicate", "shm"});
  auto hello = nx::CreateHello(b, 1, 1, name, 0, feats);
  b.Finish(nx::CreateRequest(b, 0, nx::RequestBody::Hello, hello.Union(), 0, /*priority=*/7),
           nx::RequestIdentifier());
  Bytes header(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());

  dw::StreamDecoder d(dw::Role::kServer, {});
  std::vector<dw::Event> ev;
  d.Feed(FrameReq(header), ev);
  ASSERT_EQ(ev.size(), 1u);
  ASSERT_EQ(ev[0].kind, dw::Event::Kind::kMessage) << ev[0].error.message;
  const fb::Hello* h = ev[0].message.request()->body_as_Hello();
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->client_name()->str(), "client-1.1");
  EXPECT_EQ(d.session().peer_minor(), 1);
  EXPECT_EQ(d.session().negotiated_minor(), 0);

  // A 1.1 reply with its new field, to a 1.0 client.
  flatbuffers::FlatBufferBuilder rb;
  auto sname = rb.CreateString("deepxd-1.1");
  auto hr = nx::CreateHelloReply(rb, 1, 1, sname);
  rb.Finish(nx::CreateReply(rb, 0, nx::Status::OK, 0, nx::ReplyBody::HelloReply, hr.Union(), 0,
                            /*server_time_ns=*/123456789),
            nx::RequestIdentifier());
  auto ce = Decode(dw::Role::kClient, FrameRep(Bytes(rb.GetBufferPointer(),
                                                     rb.GetBufferPointer() + rb.GetSize())));
  ASSERT_EQ(ce.size(), 1u);
  ASSERT_EQ(ce[0].kind, dw::Event::Kind::kMessage) << ce[0].error.message;
  EXPECT_EQ(ce[0].message.reply()->body_as_HelloReply()->server_name()->str(), "deepxd-1.1");
}

TEST(WireVersion, UnknownRequestTypeIsAnsweredUnsupportedAndTheSessionGoesOn) {
  flatbuffers::FlatBufferBuilder b;
  auto frob = nx::CreateFrobnicate(b, 3);
  b.Finish(nx::CreateRequest(b, 42, nx::RequestBody::Frobnicate, frob.Union()),
           nx::RequestIdentifier());
  Bytes header(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
  auto events = Decode(dw::Role::kServer,
                       Cat({Hello(), FrameReq(header), FrameReq(dw::request::ListOps(43))}));
  ASSERT_EQ(events.size(), 3u);
  ExpectError(events[1], DX_UNSUPPORTED, "unknown request type 19", false);
  EXPECT_EQ(events[1].task_id, 42u);
  EXPECT_EQ(events[2].kind, dw::Event::Kind::kMessage);
  EXPECT_EQ(events[2].task_id, 43u);
}

TEST(WireVersion, UnknownReplyPayloadIsIgnored) {
  flatbuffers::FlatBufferBuilder b;
  auto body = nx::CreateFrobnicated(b, true);
  auto msg = b.CreateString("done, with more to say");
  b.Finish(nx::CreateReply(b, 42, nx::Status::OK, msg, nx::ReplyBody::Frobnicated, body.Union()),
           nx::RequestIdentifier());
  auto m = ClientOne(FrameRep(Bytes(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize())));
  EXPECT_EQ(m.task_id, 42u);
  EXPECT_EQ(m.reply()->status(), fb::Status::OK);
  EXPECT_EQ(m.reply()->message()->str(), "done, with more to say");
  // The payload's type is past this minor's union: no accessor returns it.
  EXPECT_GT(static_cast<int>(m.reply()->body_type()), static_cast<int>(fb::ReplyBody::MAX));
  EXPECT_EQ(m.reply()->body_as_StatsReply(), nullptr);
}

TEST(WireVersion, StatusValuesAreTheAbiValues) {
  EXPECT_STREQ(dw::StatusName(DX_NOT_FOUND), "DX_NOT_FOUND");
  EXPECT_STREQ(dw::StatusName(DX_DATA_LOSS), "DX_DATA_LOSS");
  EXPECT_STREQ(dw::StatusName(999), "DX_UNKNOWN");
  EXPECT_EQ(static_cast<int>(fb::Status::MAX), DX_DATA_LOSS);
  // A status a newer minor added reads as UNKNOWN in a refused Hello.
  auto ce = Decode(dw::Role::kClient,
                   FrameRep(dw::reply::Error(0, static_cast<dx_status_t>(77), "new status")));
  ASSERT_EQ(ce.size(), 1u);
  EXPECT_EQ(ce[0].error.code, DX_UNKNOWN);
}

// ---- ordering ---------------------------------------------------------------------------------

TEST(WireSession, RequestBeforeHelloAndSecondHelloAreOutOfOrder) {
  auto events = Decode(dw::Role::kServer,
                       Cat({FrameReq(dw::request::ListOps(1)), Hello(),
                            FrameReq(dw::request::Hello(2, "again")),
                            FrameReq(dw::request::ListOps(3))}));
  ASSERT_EQ(events.size(), 4u);
  ExpectError(events[0], DX_FAILED_PRECONDITION, "first request of a session must be Hello",
              false);
  EXPECT_EQ(events[0].task_id, 1u);
  EXPECT_EQ(events[1].kind, dw::Event::Kind::kMessage);
  ExpectError(events[2], DX_FAILED_PRECONDITION, "a second Hello", false);
  EXPECT_EQ(events[2].task_id, 2u);
  EXPECT_EQ(events[3].kind, dw::Event::Kind::kMessage);
}

TEST(WireSession, ClientExpectsTheHelloReplyFirstAndOnce) {
  auto e1 = Decode(dw::Role::kClient, FrameRep(dw::reply::Ok(1)));
  ASSERT_EQ(e1.size(), 1u);
  ExpectError(e1[0], DX_FAILED_PRECONDITION, "first reply of a session must be the HelloReply",
              true);
  auto e2 = Decode(dw::Role::kClient, Cat({HelloReply(), HelloReply()}));
  ASSERT_EQ(e2.size(), 2u);
  ExpectError(e2[1], DX_FAILED_PRECONDITION, "a second HelloReply", true);
}

TEST(WireSession, ARequestRefusedBeforeHelloHasItsBulkSkipped) {
  Bytes data(100, 1);
  auto events = Decode(dw::Role::kServer,
                       Cat({FrameReq(dw::request::TensorWrite(5, 1, 0, data.size()), data), Hello(),
                            FrameReq(dw::request::ListOps(6))}));
  ASSERT_EQ(events.size(), 3u);
  ExpectError(events[0], DX_FAILED_PRECONDITION, "must be Hello", false);
  EXPECT_EQ(events[1].kind, dw::Event::Kind::kMessage);
  EXPECT_EQ(events[2].task_id, 6u);
}

// ---- bulk -------------------------------------------------------------------------------------

TEST(WireBulk, LengthMismatches) {
  Bytes data(10, 2);
  Bytes write_hdr = dw::request::TensorWrite(7, 1, 0, 10);
  Bytes hframe = RawFrame(0, write_hdr, static_cast<uint32_t>(write_hdr.size()));
  {  // a header frame where bulk bytes were expected
    auto ev = Decode(dw::Role::kServer, Cat({Hello(), hframe, FrameReq(dw::request::ListOps(8))}));
    ASSERT_EQ(ev.size(), 2u);
    ExpectError(ev[1], DX_INVALID_ARGUMENT, "10 bulk bytes of task 7 still expected", true);
  }
  {  // a bulk frame larger than what is left
    auto ev = Decode(dw::Role::kServer, Cat({Hello(), hframe, RawFrame(1, Bytes(11, 0), 11)}));
    ASSERT_EQ(ev.size(), 2u);
    ExpectError(ev[1], DX_INVALID_ARGUMENT, "only 10 left", true);
  }
  {  // a bulk frame nobody announced
    auto ev = Decode(dw::Role::kServer, Cat({Hello(), RawFrame(1, Bytes(4, 0), 4)}));
    ASSERT_EQ(ev.size(), 2u);
    ExpectError(ev[1], DX_INVALID_ARGUMENT, "that no header announced", true);
  }
  {  // the stream ends before the bulk bytes do
    dw::StreamDecoder d(dw::Role::kServer, {});
    std::vector<dw::Event> ev;
    d.Feed(Cat({Hello(), hframe, RawFrame(1, Bytes(4, 0), 4)}), ev);
    ASSERT_EQ(ev.size(), 1u);
    dw::Status s = d.Finish();
    EXPECT_EQ(s.code, DX_IO_ERROR);
    EXPECT_NE(s.message.find("6 bulk bytes of task 7 missing"), std::string::npos) << s.message;
  }
  {  // the writer checks the announced length
    Bytes out;
    dw::Status s = dw::EncodeRequest(out, write_hdr, Bytes(9, 0), {});
    EXPECT_EQ(s.code, DX_INVALID_ARGUMENT);
    EXPECT_NE(s.message.find("announces 10 bulk bytes, 9 given"), std::string::npos);
    EXPECT_TRUE(out.empty());
  }
}

TEST(WireBulk, OverTheMessageCapIsFatalAndBulkOnlyOnTensorWrite) {
  dw::Limits l;
  l.max_bulk_bytes = 100;
  Bytes big = dw::request::TensorWrite(7, 1, 0, 101);
  auto ev = Decode(dw::Role::kServer,
                   Cat({Hello(), RawFrame(0, big, static_cast<uint32_t>(big.size()))}), l);
  ASSERT_EQ(ev.size(), 2u);
  ExpectError(ev[1], DX_RESOURCE_EXHAUSTED, "announces 101 bulk bytes", true);

  // Bulk after a request that takes none: refused, its bulk skipped, the session goes on.
  flatbuffers::FlatBufferBuilder b;
  b.Finish(fb::CreateRequest(b, 9, fb::RequestBody::Stats, fb::CreateStats(b).Union(), 5),
           fb::RequestIdentifier());
  Bytes stats(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
  auto ev2 = Decode(dw::Role::kServer,
                    Cat({Hello(), FrameReq(stats, Bytes(5, 0)), FrameReq(dw::request::ListOps(10))}));
  ASSERT_EQ(ev2.size(), 3u);
  ExpectError(ev2[1], DX_INVALID_ARGUMENT, "only TensorWrite carries bulk bytes", false);
  EXPECT_EQ(ev2[2].task_id, 10u);
}

TEST(WireLimits, Validate) {
  EXPECT_TRUE(dw::Limits{}.validate().ok());
  dw::Limits l;
  l.max_header_bytes = dw::Limits::kMaxHeaderBytes + 1;
  EXPECT_EQ(l.validate().code, DX_INVALID_ARGUMENT);
  l = {};
  l.max_bulk_frame_bytes = 0;
  EXPECT_EQ(l.validate().code, DX_INVALID_ARGUMENT);
}

// ---- the fuzz target's checked-in inputs ----------------------------------------------------

TEST(WireCorpus, FuzzInputsDecodeToVerifiedMessagesOrErrors) {
  namespace fs = std::filesystem;
  dw::Limits l;  // the limits fuzz_wire uses
  l.max_header_bytes = 4096;
  l.max_bulk_frame_bytes = 256;
  l.max_bulk_bytes = 4096;
  int files = 0, crash_inputs = 0, messages = 0;
  for (const auto& entry : fs::directory_iterator(DEEPX_WIRE_CORPUS_DIR)) {
    std::ifstream in(entry.path(), std::ios::binary);
    Bytes input((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_FALSE(input.empty()) << entry.path();
    ++files;
    if (entry.path().filename().string().rfind("crash-", 0) == 0) ++crash_inputs;
    const dw::Role role = (input[0] & 1) ? dw::Role::kClient : dw::Role::kServer;
    Bytes stream(input.begin() + 1, input.end());
    auto events = Decode(role, stream, l);
    auto bytewise = Decode(role, stream, l, 1);
    // What each input that once crashed fuzz_wire must now be refused with.
    const std::string name = entry.path().filename().string();
    const char* expected = name == "crash-misaligned-int64-vector"
                               ? "TensorView.shape: elements not aligned to 8 bytes"
                           : name == "crash-body-type-without-body"
                               ? "the reply's body (type 2) is missing"
                               : nullptr;
    if (expected) {
      bool found = false;
      for (const auto& e : events) found = found || e.error.message == expected;
      EXPECT_TRUE(found) << name << " is no longer refused with: " << expected;
    }
    ASSERT_EQ(events.size(), bytewise.size()) << entry.path();
    for (size_t i = 0; i < events.size(); ++i) {
      const dw::Event& e = events[i];
      EXPECT_EQ(e.kind, bytewise[i].kind);
      EXPECT_EQ(e.error.code, bytewise[i].error.code);
      if (e.fatal) {
        EXPECT_EQ(i + 1, events.size()) << "an event after a fatal one";
      }
      if (e.kind != dw::Event::Kind::kMessage) continue;
      ++messages;
      if (role == dw::Role::kServer) {
        EXPECT_TRUE(dw::VerifyRequest(e.message.header, l).ok()) << entry.path();
        EXPECT_EQ(e.message.request()->bulk_bytes(), e.message.bulk.size());
      } else {
        EXPECT_TRUE(dw::VerifyReply(e.message.header, l).ok()) << entry.path();
        EXPECT_EQ(e.message.reply()->bulk_bytes(), e.message.bulk.size());
      }
    }
  }
  EXPECT_GE(files, 6);
  EXPECT_GE(crash_inputs, 2);
  EXPECT_GT(messages, 10) << "the seeds hold valid messages";
}
