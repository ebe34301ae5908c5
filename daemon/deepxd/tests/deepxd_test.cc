// deepxd against real daemon processes (label `daemon`): each test starts deepxd on a socket
// in a temporary directory with the CPU plugin, talks to it with the test client (client.h)
// over the unix socket, and stops it.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <fstream>
#include <string>
#include <vector>

#include <deepx/host.h>  // DX_DTYPE_* (constants only)
#include <gtest/gtest.h>

#include "client.h"
#include "process.h"

namespace {

using deepx::daemon::testing::Client;
using deepx::daemon::testing::DaemonProcess;
using deepx::daemon::testing::HandleOf;
using deepx::daemon::testing::Reply;
namespace wire = deepx::wire;
namespace fb = deepx::wire::fb;

const std::string kDeepxd = DEEPXD_PATH;
const std::string kCpuPlugin = DEEPX_CPU_PLUGIN;

std::string BaseConfig(const std::string& extra = "") {
  return "[plugins]\npaths = [\"" + kCpuPlugin + "\"]\n[log]\nlevel = \"debug\"\n" + extra;
}

std::span<const uint8_t> Bytes(const std::vector<float>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(float)};
}

std::vector<float> Floats(const Reply& r) {
  std::vector<float> v(r.bulk.size() / sizeof(float));
  std::memcpy(v.data(), r.bulk.data(), v.size() * sizeof(float));
  return v;
}

class Deepxd : public ::testing::Test {
 protected:
  void StartWith(const std::string& config) {
    ASSERT_TRUE(daemon_.Start(kDeepxd, config)) << daemon_.error();
  }
  void SetUp() override {}
  std::unique_ptr<Client> Connected(bool hello = true) {
    std::string err;
    auto c = Client::Connect(daemon_.socket(), &err);
    EXPECT_TRUE(c) << err;
    if (c && hello) {
      EXPECT_TRUE(c->Hello()) << c->error();
    }
    return c;
  }
  // A 2-D f32 tensor with |values|.
  uint64_t Tensor(Client& c, std::vector<int64_t> shape, const std::vector<float>& values) {
    uint64_t h = 0;
    auto r = c.CreateTensor(next_task_++, DX_DTYPE_F32, shape, &h);
    EXPECT_TRUE(r && r->status == DX_OK) << (r ? r->message : c.error());
    if (!values.empty()) {
      auto w = c.WriteTensor(next_task_++, h, Bytes(values));
      EXPECT_TRUE(w && w->status == DX_OK) << (w ? w->message : c.error());
    }
    return h;
  }
  std::vector<float> Read(Client& c, uint64_t h, size_t n) {
    auto r = c.ReadTensor(next_task_++, h, n * sizeof(float));
    EXPECT_TRUE(r && r->status == DX_OK) << (r ? r->message : c.error());
    return r ? Floats(*r) : std::vector<float>{};
  }
  DaemonProcess daemon_;
  uint64_t next_task_ = 100;
};

// ---- hello and versions ---------------------------------------------------------------------

TEST_F(Deepxd, HelloExchangesVersions) {
  StartWith(BaseConfig());
  auto c = Connected(false);
  auto r = c->Call(wire::request::Hello(0, "test", 1, 7));
  ASSERT_TRUE(r) << c->error();
  EXPECT_EQ(r->status, DX_OK) << r->message;
  auto* h = r->get()->body_as_HelloReply();
  ASSERT_TRUE(h);
  EXPECT_EQ(h->major(), wire::kProtocolMajor);
  EXPECT_EQ(h->minor(), wire::kProtocolMinor);
  EXPECT_EQ(h->server_name()->str(), "deepxd");
  // A second Hello is out of order; the session goes on.
  r = c->Call(wire::request::Hello(5, "again"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_FAILED_PRECONDITION);
  EXPECT_EQ(r->task_id, 5u);
  r = c->Call(wire::request::ListOps(6));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_OK);
}

TEST_F(Deepxd, OtherMajorIsRefusedAndClosed) {
  StartWith(BaseConfig());
  auto c = Connected(false);
  auto r = c->Call(wire::request::Hello(0, "future", 2, 0));
  ASSERT_TRUE(r) << c->error();
  EXPECT_EQ(r->status, DX_VERSION_MISMATCH);
  EXPECT_NE(r->message.find("2.0"), std::string::npos) << r->message;
  EXPECT_TRUE(c->WaitClosed());
}

// ---- lists ----------------------------------------------------------------------------------

TEST_F(Deepxd, ListsPluginsOpsDevicesKernels) {
  StartWith(BaseConfig());
  auto c = Connected();
  auto r = c->Call(wire::request::ListPlugins(1));
  ASSERT_TRUE(r && r->status == DX_OK);
  auto* pl = r->get()->body_as_PluginList();
  ASSERT_TRUE(pl && pl->plugins());
  ASSERT_EQ(pl->plugins()->size(), 1u);
  EXPECT_EQ(pl->plugins()->Get(0)->name()->str(), "cpu");

  r = c->Call(wire::request::ListOps(2));
  ASSERT_TRUE(r && r->status == DX_OK);
  std::vector<std::string> ops;
  for (auto* s : *r->get()->body_as_OpList()->ops()) ops.push_back(s->str());
  EXPECT_NE(std::find(ops.begin(), ops.end(), "dx.add"), ops.end());
  EXPECT_NE(std::find(ops.begin(), ops.end(), "dx.matmul"), ops.end());

  r = c->Call(wire::request::ListDevices(3));
  ASSERT_TRUE(r && r->status == DX_OK);
  auto* dl = r->get()->body_as_DeviceList();
  ASSERT_TRUE(dl && dl->devices() && dl->devices()->size() >= 1);
  EXPECT_EQ(dl->devices()->Get(0)->name()->str(), "cpu");
  EXPECT_EQ(dl->devices()->Get(0)->plugin()->str(), "cpu");
  EXPECT_EQ(dl->devices()->Get(0)->kind()->str(), "host");

  r = c->Call(wire::request::ListKernels(4, "dx.add", ""));
  ASSERT_TRUE(r && r->status == DX_OK);
  auto* kl = r->get()->body_as_KernelList();
  ASSERT_TRUE(kl && kl->kernels() && kl->kernels()->size() > 0);
  for (auto* k : *kl->kernels()) {
    EXPECT_EQ(k->op()->str(), "dx.add");
    EXPECT_EQ(k->plugin()->str(), "cpu");
    EXPECT_EQ(k->device()->str(), "cpu");
    EXPECT_GT(k->dtypes()->size(), 0u);
  }
  r = c->Call(wire::request::ListKernels(5, "dx.no_such_op", ""));
  ASSERT_TRUE(r && r->status == DX_OK);
  EXPECT_EQ(r->get()->body_as_KernelList()->kernels()->size(), 0u);
}

// ---- tensors and ops ------------------------------------------------------------------------

TEST_F(Deepxd, TensorCreateWriteReadRoundTrip) {
  StartWith(BaseConfig());
  auto c = Connected();
  uint64_t h = 0;
  auto r = c->CreateTensor(1, DX_DTYPE_F32, {2, 3}, &h, "cpu");
  ASSERT_TRUE(r && r->status == DX_OK) << (r ? r->message : c->error());
  ASSERT_NE(h, 0u);
  auto* info = r->get()->body_as_TensorInfo();
  EXPECT_EQ(info->dtype(), DX_DTYPE_F32);
  EXPECT_EQ(std::vector<int64_t>(info->shape()->begin(), info->shape()->end()),
            (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::vector<int64_t>(info->strides()->begin(), info->strides()->end()),
            (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(info->device()->str(), "cpu");
  std::vector<float> v{1, 2, 3, 4, 5, 6};
  r = c->WriteTensor(2, h, Bytes(v));
  ASSERT_TRUE(r && r->status == DX_OK) << (r ? r->message : c->error());
  EXPECT_EQ(r->task_id, 2u);
  EXPECT_EQ(Read(*c, h, 6), v);
  // A part: bytes 4..11 (elements 1 and 2), and a partial write.
  r = c->ReadTensor(3, h, 8, 4);
  ASSERT_TRUE(r && r->status == DX_OK);
  EXPECT_EQ(Floats(*r), (std::vector<float>{2, 3}));
  std::vector<float> patch{-1, -2};
  r = c->WriteTensor(4, h, Bytes(patch), 12);
  ASSERT_TRUE(r && r->status == DX_OK) << r->message;
  EXPECT_EQ(Read(*c, h, 6), (std::vector<float>{1, 2, 3, -1, -2, 6}));
  // Out of range.
  r = c->ReadTensor(5, h, 8, 20);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_OUT_OF_RANGE);
  // Copy and a view.
  uint64_t h2 = Tensor(*c, {2, 3}, {});
  r = c->Call(wire::request::TensorCopy(6, h, h2));
  ASSERT_TRUE(r && r->status == DX_OK) << r->message;
  EXPECT_EQ(Read(*c, h2, 6), (std::vector<float>{1, 2, 3, -1, -2, 6}));
  std::vector<int64_t> vshape{3}, vstrides{1};
  r = c->Call(wire::request::TensorView(7, h2, vshape, vstrides, 3));
  ASSERT_TRUE(r && r->status == DX_OK) << r->message;
  EXPECT_EQ(Read(*c, HandleOf(*r), 3), (std::vector<float>{-1, -2, 6}));
}

TEST_F(Deepxd, LargeWriteAndReadInFramesAtOffsetsAndAReadPipelinedBeforeAFree) {
  StartWith(BaseConfig());
  auto c = Connected();
  // 2.5 bulk frames of the default 4 MiB cap plus a few bytes: not a multiple of the cap.
  const int64_t n = ((10u << 20) + 12) / 4;
  uint64_t h = 0;
  auto r = c->CreateTensor(1, DX_DTYPE_F32, {n}, &h, "cpu");
  ASSERT_TRUE(r && r->status == DX_OK) << (r ? r->message : c->error());
  std::vector<uint8_t> bytes(size_t(n) * 4);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + (i >> 12));
  r = c->WriteTensor(2, h, bytes);
  ASSERT_TRUE(r && r->status == DX_OK) << (r ? r->message : c->error());
  r = c->ReadTensor(3, h, bytes.size());
  ASSERT_TRUE(r && r->status == DX_OK) << (r ? r->message : c->error());
  EXPECT_TRUE(r->bulk == bytes);
  // A partial write across a frame boundary at an odd offset, then a partial read of it.
  const uint64_t off = (4u << 20) - 5;
  std::vector<uint8_t> patch((4u << 20) + 9, 0xee);
  r = c->WriteTensor(4, h, patch, off);
  ASSERT_TRUE(r && r->status == DX_OK) << (r ? r->message : c->error());
  std::copy(patch.begin(), patch.end(), bytes.begin() + off);
  r = c->ReadTensor(5, h, patch.size() + 10, off - 3);
  ASSERT_TRUE(r && r->status == DX_OK) << (r ? r->message : c->error());
  EXPECT_TRUE(r->bulk == std::vector<uint8_t>(bytes.begin() + off - 3,
                                              bytes.begin() + off + patch.size() + 7));
  // A read and, pipelined behind it, the tensor's free: the read still answers its bytes.
  std::vector<uint8_t> pipelined;
  ASSERT_TRUE(wire::EncodeRequest(pipelined, wire::request::TensorRead(6, h, 0, bytes.size()), {},
                                  {}).ok());
  ASSERT_TRUE(wire::EncodeRequest(pipelined, wire::request::TensorFree(7, h), {}, {}).ok());
  ASSERT_TRUE(wire::EncodeRequest(pipelined, wire::request::TensorRead(8, h, 0, 4), {}, {}).ok());
  ASSERT_TRUE(c->SendRaw(pipelined));
  r = c->Receive();
  ASSERT_TRUE(r && r->status == DX_OK) << (r ? r->message : c->error());
  EXPECT_EQ(r->task_id, 6u);
  EXPECT_TRUE(r->bulk == bytes);
  r = c->Receive();
  ASSERT_TRUE(r && r->status == DX_OK && r->task_id == 7u);
  r = c->Receive();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->task_id, 8u);
  EXPECT_EQ(r->status, DX_NOT_FOUND) << r->message;
}

TEST_F(Deepxd, WriteWhoseBulkEndsEarlyClosesWithoutAHang) {
  StartWith(BaseConfig());
  auto c = Connected();
  uint64_t h = 0;
  auto r = c->CreateTensor(1, DX_DTYPE_U8, {int64_t(6u << 20)}, &h, "cpu");
  ASSERT_TRUE(r && r->status == DX_OK) << (r ? r->message : c->error());
  std::vector<uint8_t> data(6u << 20, 7), bytes;
  ASSERT_TRUE(wire::EncodeRequest(bytes, wire::request::TensorWrite(2, h, 0, data.size()), data,
                                  {}).ok());
  // Cut in the middle of the second bulk frame, then end the stream.
  ASSERT_TRUE(c->SendRaw(std::span<const uint8_t>(bytes).first(bytes.size() - (1u << 20))));
  c->ShutdownWrite();
  EXPECT_TRUE(c->WaitClosed());
  auto c2 = Connected();
  EXPECT_NE(daemon_.log().find("stream ended"), std::string::npos) << daemon_.log();
}

TEST_F(Deepxd, InvokeAddAndMatmul) {
  StartWith(BaseConfig());
  auto c = Connected();
  uint64_t a = Tensor(*c, {2, 2}, {1, 2, 3, 4});
  uint64_t b = Tensor(*c, {2, 2}, {5, 6, 7, 8});
  uint64_t out = Tensor(*c, {2, 2}, {});
  wire::OpCall add{"dx.add", {a, b}, {out}, {}, "", false};
  auto r = c->Call(wire::request::Invoke(10, add));
  ASSERT_TRUE(r) << c->error();
  ASSERT_EQ(r->status, DX_OK) << r->message;
  EXPECT_EQ(r->task_id, 10u);
  EXPECT_EQ(Read(*c, out, 4), (std::vector<float>{6, 8, 10, 12}));
  wire::OpCall mm{"dx.matmul", {a, b}, {out}, {}, "cpu", false};
  r = c->Call(wire::request::Invoke(11, mm));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, DX_OK) << r->message;
  EXPECT_EQ(Read(*c, out, 4), (std::vector<float>{19, 22, 43, 50}));
  // A kernel's own error comes back with its status.
  uint64_t wrong = Tensor(*c, {3, 3}, {});
  wire::OpCall bad{"dx.add", {a, b}, {wrong}, {}, "", false};
  r = c->Call(wire::request::Invoke(12, bad));
  ASSERT_TRUE(r);
  EXPECT_NE(r->status, DX_OK);
  EXPECT_NE(r->message.find("dx.add"), std::string::npos) << r->message;
}

TEST_F(Deepxd, AttributesReachTheKernel) {
  StartWith(BaseConfig());
  auto c = Connected();
  uint64_t x = Tensor(*c, {2, 3}, {1, 2, 3, 4, 5, 6});
  uint64_t y = Tensor(*c, {2}, {});
  wire::AttrValue axes{"axes", fb::AttrType::INTS, 0, 0, {1}, {}, ""};
  wire::AttrValue keep{"keepdims", fb::AttrType::INT, 0, 0, {}, {}, ""};
  wire::OpCall sum{"dx.sum", {x}, {y}, {axes, keep}, "", false};
  auto r = c->Call(wire::request::Invoke(1, sum));
  ASSERT_TRUE(r) << c->error();
  ASSERT_EQ(r->status, DX_OK) << r->message;
  EXPECT_EQ(Read(*c, y, 2), (std::vector<float>{6, 15}));
  // An attribute the op does not have is the host's clear error.
  wire::AttrValue bogus{"no_such_attr", fb::AttrType::FLOAT, 0, 1.5, {}, {}, ""};
  wire::OpCall bad{"dx.sum", {x}, {y}, {axes, bogus}, "", false};
  r = c->Call(wire::request::Invoke(2, bad));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_INVALID_ARGUMENT);
  EXPECT_NE(r->message.find("no_such_attr"), std::string::npos) << r->message;
}

TEST_F(Deepxd, SubmitRunsAProgramInOrder) {
  StartWith(BaseConfig());
  auto c = Connected();
  uint64_t a = Tensor(*c, {2, 2}, {1, 2, 3, 4});
  uint64_t b = Tensor(*c, {2, 2}, {1, 0, 0, 1});
  uint64_t t = Tensor(*c, {2, 2}, {});
  uint64_t u = Tensor(*c, {2, 2}, {});
  uint64_t v = Tensor(*c, {2, 2}, {});
  // t = a + b; u = t * a; v = u @ a
  std::vector<wire::OpCall> program{{"dx.add", {a, b}, {t}, {}, "", false},
                                    {"dx.mul", {t, a}, {u}, {}, "", false},
                                    {"dx.matmul", {u, a}, {v}, {}, "", false}};
  auto r = c->Call(wire::request::Submit(20, program));
  ASSERT_TRUE(r) << c->error();
  ASSERT_EQ(r->status, DX_OK) << r->message;
  ASSERT_TRUE(r->get()->body_as_SubmitResult());
  EXPECT_EQ(r->get()->body_as_SubmitResult()->ops_completed(), 3u);
  // t = [2 2; 3 5], u = [2 4; 9 20], v = u @ a = [14 20; 69 98]
  EXPECT_EQ(Read(*c, v, 4), (std::vector<float>{14, 20, 69, 98}));
  // A program stops at its first failure and says how far it got.
  std::vector<wire::OpCall> broken{{"dx.add", {a, b}, {t}, {}, "", false},
                                   {"dx.no_such_op", {t}, {u}, {}, "", false},
                                   {"dx.add", {a, b}, {v}, {}, "", false}};
  r = c->Call(wire::request::Submit(21, broken));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_NOT_FOUND);
  EXPECT_NE(r->message.find("op 1"), std::string::npos) << r->message;
  EXPECT_EQ(r->get()->body_as_SubmitResult()->ops_completed(), 1u);
}

TEST_F(Deepxd, PipelinedRequestsAndCancel) {
  StartWith(BaseConfig());
  auto c = Connected();
  uint64_t a = Tensor(*c, {2, 2}, {1, 2, 3, 4});
  uint64_t out = Tensor(*c, {2, 2}, {0, 0, 0, 0});
  // Three requests in one write: the Cancel reaches task 31 while it is still queued.
  std::vector<uint8_t> bytes;
  wire::OpCall add{"dx.add", {a, a}, {out}, {}, "", false};
  ASSERT_TRUE(wire::EncodeRequest(bytes, wire::request::Invoke(30, add), {}, {}).ok());
  ASSERT_TRUE(wire::EncodeRequest(bytes, wire::request::Invoke(31, add), {}, {}).ok());
  ASSERT_TRUE(wire::EncodeRequest(bytes, wire::request::Cancel(32, 31), {}, {}).ok());
  ASSERT_TRUE(c->SendRaw(bytes));
  std::map<uint64_t, dx_status_t> got;
  for (int i = 0; i < 3; ++i) {
    auto r = c->Receive();
    ASSERT_TRUE(r) << c->error();
    got[r->task_id] = r->status;
  }
  EXPECT_EQ(got[30], DX_OK);
  EXPECT_EQ(got[31], DX_CANCELLED);
  EXPECT_EQ(got[32], DX_OK);
  // Nothing queued: said so.
  auto r = c->Call(wire::request::Cancel(33, 30));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_NOT_FOUND);
  EXPECT_NE(r->message.find("nothing to cancel"), std::string::npos) << r->message;
  // Stats of the session.
  r = c->Call(wire::request::Stats(34));
  ASSERT_TRUE(r && r->status == DX_OK);
  auto* st = r->get()->body_as_StatsReply();
  EXPECT_EQ(st->tensors(), 2u);
  EXPECT_EQ(st->bytes_allocated(), 32u);
  EXPECT_GE(st->tasks_failed(), 2u);
}

// ---- error paths ----------------------------------------------------------------------------

TEST_F(Deepxd, GarbageBytesAreAnsweredAndClosed) {
  StartWith(BaseConfig());
  auto c = Connected(false);
  const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_TRUE(c->SendRaw({reinterpret_cast<const uint8_t*>(junk), sizeof junk - 1}));
  auto r = c->Receive();
  ASSERT_TRUE(r) << c->error();
  EXPECT_EQ(r->status, DX_INVALID_ARGUMENT);
  EXPECT_NE(r->message.find("magic"), std::string::npos) << r->message;
  EXPECT_TRUE(c->WaitClosed());
  // The daemon lives on.
  auto c2 = Connected();
}

TEST_F(Deepxd, RequestsBeforeABrokenFrameAreAnsweredFirst) {
  StartWith(BaseConfig());
  auto c = Connected();
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(wire::EncodeRequest(bytes, wire::request::ListOps(1), {}, {}).ok());
  ASSERT_TRUE(wire::EncodeRequest(bytes, wire::request::Stats(2), {}, {}).ok());
  const char junk[] = "not a frame";
  bytes.insert(bytes.end(), junk, junk + sizeof junk);
  ASSERT_TRUE(c->SendRaw(bytes));
  auto r = c->Receive();
  ASSERT_TRUE(r) << c->error();
  EXPECT_EQ(r->task_id, 1u);
  EXPECT_EQ(r->status, DX_OK);
  r = c->Receive();
  ASSERT_TRUE(r) << c->error();
  EXPECT_EQ(r->task_id, 2u);
  EXPECT_EQ(r->status, DX_OK);
  r = c->Receive();
  ASSERT_TRUE(r) << c->error();
  EXPECT_EQ(r->task_id, 0u);
  EXPECT_EQ(r->status, DX_INVALID_ARGUMENT);
  EXPECT_TRUE(c->WaitClosed());
}

TEST_F(Deepxd, TruncatedFrameThenEndOfStream) {
  StartWith(BaseConfig());
  auto c = Connected(false);
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(wire::EncodeRequest(bytes, wire::request::Hello(0, "cut"), {}, {}).ok());
  ASSERT_TRUE(c->SendRaw(std::span<const uint8_t>(bytes).first(bytes.size() / 2)));
  c->ShutdownWrite();
  EXPECT_TRUE(c->WaitClosed());
  auto c2 = Connected();
  EXPECT_NE(daemon_.log().find("stream ended"), std::string::npos) << daemon_.log();
}

TEST_F(Deepxd, OversizedFrameIsRefused) {
  StartWith(BaseConfig("[limits]\nmax_header_bytes = 4096\n"));
  auto c = Connected();
  // A header frame announcing 1 MiB, over the configured 4096.
  uint8_t hdr[12] = {'D', 'X', 'W', 'F', 0, 0, 0, 0, 0, 0, 0x10, 0};
  ASSERT_TRUE(c->SendRaw(hdr));
  auto r = c->Receive();
  ASSERT_TRUE(r) << c->error();
  EXPECT_EQ(r->status, DX_RESOURCE_EXHAUSTED);
  EXPECT_TRUE(c->WaitClosed());
}

TEST_F(Deepxd, RequestBeforeHelloIsOutOfOrder) {
  StartWith(BaseConfig());
  auto c = Connected(false);
  auto r = c->Call(wire::request::ListOps(7));
  ASSERT_TRUE(r) << c->error();
  EXPECT_EQ(r->status, DX_FAILED_PRECONDITION);
  EXPECT_EQ(r->task_id, 7u);
  EXPECT_TRUE(c->Hello());
}

TEST_F(Deepxd, StaleHandleIsRefused) {
  StartWith(BaseConfig());
  auto c = Connected();
  uint64_t h = Tensor(*c, {4}, {1, 2, 3, 4});
  auto r = c->Call(wire::request::TensorFree(1, h));
  ASSERT_TRUE(r && r->status == DX_OK);
  r = c->ReadTensor(2, h, 16);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_NOT_FOUND);
  EXPECT_NE(r->message.find("stale"), std::string::npos) << r->message;
  r = c->Call(wire::request::TensorFree(3, h));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_NOT_FOUND);
  // The slot is reused with a new generation: the old handle stays stale.
  uint64_t h2 = Tensor(*c, {4}, {});
  EXPECT_NE(h2, h);
  r = c->ReadTensor(4, h, 16);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_NOT_FOUND);
  r = c->ReadTensor(5, 0, 16);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_INVALID_ARGUMENT);
  r = c->ReadTensor(6, 0xdeadbeef00001234ull, 16);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_NOT_FOUND);
}

TEST_F(Deepxd, UnknownOpIsNotFound) {
  StartWith(BaseConfig());
  auto c = Connected();
  uint64_t a = Tensor(*c, {2}, {1, 2});
  wire::OpCall call{"dx.no_such_op", {a}, {a}, {}, "", false};
  auto r = c->Call(wire::request::Invoke(1, call));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_NOT_FOUND);
  EXPECT_NE(r->message.find("dx.no_such_op"), std::string::npos) << r->message;
  wire::OpCall other{"dx.add", {a, a}, {a}, {}, "no-such-plugin", false};
  r = c->Call(wire::request::Invoke(2, other));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_NOT_FOUND);
}

TEST_F(Deepxd, QuotasAreEnforced) {
  StartWith(BaseConfig("[quotas]\nmax_tensor_bytes = 1024\nmax_tensors = 3\nmax_inflight = 2\n"));
  auto c = Connected();
  uint64_t h = 0;
  auto r = c->CreateTensor(1, DX_DTYPE_F32, {300}, &h);  // 1200 bytes
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_RESOURCE_EXHAUSTED);
  EXPECT_NE(r->message.find("max_tensor_bytes"), std::string::npos) << r->message;
  uint64_t a = Tensor(*c, {200}, {});  // 800 bytes
  r = c->CreateTensor(2, DX_DTYPE_F32, {100}, &h);  // 400 more: over
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_RESOURCE_EXHAUSTED);
  std::vector<int64_t> shape{10}, strides{1};
  r = c->Call(wire::request::TensorView(3, a, shape, strides, 0));
  ASSERT_TRUE(r && r->status == DX_OK) << (r ? r->message : c->error());
  r = c->Call(wire::request::TensorView(4, a, shape, strides, 10));
  ASSERT_TRUE(r && r->status == DX_OK) << (r ? r->message : c->error());
  r = c->Call(wire::request::TensorView(5, a, shape, strides, 20));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_RESOURCE_EXHAUSTED);
  EXPECT_NE(r->message.find("max_tensors"), std::string::npos) << r->message;
  // In flight: three requests in one write, the third over max_inflight = 2.
  std::vector<uint8_t> bytes;
  for (uint64_t t = 40; t < 43; ++t)
    ASSERT_TRUE(wire::EncodeRequest(bytes, wire::request::ListOps(t), {}, {}).ok());
  ASSERT_TRUE(c->SendRaw(bytes));
  std::map<uint64_t, dx_status_t> got;
  for (int i = 0; i < 3; ++i) {
    auto rr = c->Receive();
    ASSERT_TRUE(rr) << c->error();
    got[rr->task_id] = rr->status;
  }
  EXPECT_EQ(got[40], DX_OK);
  EXPECT_EQ(got[41], DX_OK);
  EXPECT_EQ(got[42], DX_RESOURCE_EXHAUSTED);
}

// ---- sessions -------------------------------------------------------------------------------

TEST_F(Deepxd, SessionsAreIsolatedButShareByName) {
  StartWith(BaseConfig());
  auto a = Connected();
  auto b = Connected();
  uint64_t ha = Tensor(*a, {3}, {7, 8, 9});
  // b cannot use a's handle.
  auto r = b->ReadTensor(1, ha, 12);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_PERMISSION_DENIED);
  EXPECT_NE(r->message.find("another session"), std::string::npos) << r->message;
  r = b->Call(wire::request::TensorFree(2, ha));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_PERMISSION_DENIED);
  // Shared by an explicit name.
  r = b->Call(wire::request::TensorOpen(3, "weights"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_NOT_FOUND);
  r = a->Call(wire::request::TensorName(4, ha, "weights"));
  ASSERT_TRUE(r && r->status == DX_OK) << r->message;
  r = a->Call(wire::request::TensorName(5, ha, "weights"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_ALREADY_EXISTS);
  r = b->Call(wire::request::TensorOpen(6, "weights"));
  ASSERT_TRUE(r && r->status == DX_OK) << r->message;
  uint64_t hb = HandleOf(*r);
  EXPECT_EQ(Read(*b, hb, 3), (std::vector<float>{7, 8, 9}));
  // The same storage: a's write is seen through b's handle.
  std::vector<float> v{1, 1, 1};
  ASSERT_EQ(a->WriteTensor(7, ha, Bytes(v))->status, DX_OK);
  EXPECT_EQ(Read(*b, hb, 3), v);
  // a's session ends; b's handle keeps the storage alive.
  a.reset();
  EXPECT_EQ(Read(*b, hb, 3), v);
  r = b->Call(wire::request::TensorUnname(8, "weights"));
  ASSERT_TRUE(r && r->status == DX_OK);
  r = b->Call(wire::request::TensorOpen(9, "weights"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_NOT_FOUND);
}

TEST_F(Deepxd, SessionResumesWithinTheGracePeriod) {
  StartWith(BaseConfig("[server]\nresume_seconds = 30\n"));
  auto a = Connected(false);
  auto r = a->Call(wire::request::Hello(0, "first"));
  ASSERT_TRUE(r && r->status == DX_OK);
  uint64_t token = r->get()->body_as_HelloReply()->session_token();
  EXPECT_NE(token, 0u);
  EXPECT_FALSE(r->get()->body_as_HelloReply()->resumed());
  uint64_t h = Tensor(*a, {3}, {4, 5, 6});
  a.reset();  // the connection drops
  // Wait until the daemon has seen it (a resume of a session still attached is refused).
  for (int i = 0; i < 500 && daemon_.log().find("session detached") == std::string::npos; ++i)
    usleep(10000);
  auto b = Connected(false);
  r = b->Call(wire::request::Hello(0, "again", wire::kProtocolMajor, wire::kProtocolMinor, token));
  ASSERT_TRUE(r) << b->error();
  ASSERT_EQ(r->status, DX_OK) << r->message;
  EXPECT_TRUE(r->get()->body_as_HelloReply()->resumed());
  EXPECT_EQ(r->get()->body_as_HelloReply()->session_token(), token);
  // The same handles, the same contents.
  EXPECT_EQ(Read(*b, h, 3), (std::vector<float>{4, 5, 6}));
  // A token nobody has: refused, and the connection closes.
  auto c = Connected(false);
  r = c->Call(wire::request::Hello(0, "guess", wire::kProtocolMajor, wire::kProtocolMinor,
                                   token ^ 0x5555));
  ASSERT_TRUE(r) << c->error();
  EXPECT_EQ(r->status, DX_NOT_FOUND);
  EXPECT_TRUE(c->WaitClosed());
  // The token of a session in use by a live connection: refused.
  auto d = Connected(false);
  r = d->Call(wire::request::Hello(0, "twin", wire::kProtocolMajor, wire::kProtocolMinor, token));
  ASSERT_TRUE(r) << d->error();
  EXPECT_EQ(r->status, DX_FAILED_PRECONDITION);
}

TEST_F(Deepxd, SessionEndsAfterTheGracePeriod) {
  StartWith(BaseConfig("[server]\nresume_seconds = 0.2\n"));
  auto a = Connected(false);
  auto r = a->Call(wire::request::Hello(0, "first"));
  ASSERT_TRUE(r && r->status == DX_OK);
  uint64_t token = r->get()->body_as_HelloReply()->session_token();
  Tensor(*a, {3}, {4, 5, 6});
  a.reset();
  for (int i = 0; i < 500 && daemon_.log().find("session detached") == std::string::npos; ++i)
    usleep(10000);
  usleep(400000);
  auto b = Connected(false);
  r = b->Call(wire::request::Hello(0, "late", wire::kProtocolMajor, wire::kProtocolMinor, token));
  ASSERT_TRUE(r) << b->error();
  EXPECT_EQ(r->status, DX_NOT_FOUND);
  EXPECT_NE(r->message.find("resume_seconds"), std::string::npos) << r->message;
  EXPECT_NE(daemon_.log().find("not resumed within server.resume_seconds"), std::string::npos);
  EXPECT_NE(daemon_.log().find("\"tensors_freed\":\"1\""), std::string::npos) << daemon_.log();
}

TEST_F(Deepxd, NoResumeTokenWhenResumeIsOff) {
  StartWith(BaseConfig("[server]\nresume_seconds = 0\n"));
  auto a = Connected(false);
  auto r = a->Call(wire::request::Hello(0, "x"));
  ASSERT_TRUE(r && r->status == DX_OK);
  EXPECT_EQ(r->get()->body_as_HelloReply()->session_token(), 0u);
}

// ---- transport, signals, configuration -------------------------------------------------------

TEST_F(Deepxd, SocketIsMode0600) {
  StartWith(BaseConfig());
  struct stat st{};
  ASSERT_EQ(::stat(daemon_.socket().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(Deepxd, UidNotAllowedIsRefused) {
  uint32_t other = ::getuid() == 12345 ? 12346 : 12345;
  StartWith(BaseConfig("[server]\nallowed_uids = [" + std::to_string(other) + "]\n"));
  auto c = Connected(false);
  // Refused before anything is read: one error reply, then the end of the stream.
  auto r = c->Receive();
  ASSERT_TRUE(r) << c->error();
  EXPECT_EQ(r->status, DX_PERMISSION_DENIED);
  EXPECT_NE(r->message.find("uid " + std::to_string(::getuid())), std::string::npos)
      << r->message;
  EXPECT_TRUE(c->WaitClosed());
  EXPECT_NE(daemon_.log().find("connection refused"), std::string::npos);
}

TEST_F(Deepxd, SigtermDrainsAndRemovesTheSocket) {
  StartWith(BaseConfig());
  auto c = Connected();
  uint64_t h = Tensor(*c, {2}, {1, 2});
  EXPECT_NE(h, 0u);
  EXPECT_EQ(daemon_.Stop(SIGTERM), 0) << daemon_.log();
  struct stat st{};
  EXPECT_NE(::stat(daemon_.socket().c_str(), &st), 0);
  EXPECT_TRUE(c->WaitClosed());
  EXPECT_NE(daemon_.log().find("\"msg\":\"stopped\""), std::string::npos) << daemon_.log();
}

TEST_F(Deepxd, SigintDrainsToo) {
  StartWith(BaseConfig());
  auto c = Connected();
  EXPECT_EQ(daemon_.Stop(SIGINT), 0) << daemon_.log();
  struct stat st{};
  EXPECT_NE(::stat(daemon_.socket().c_str(), &st), 0);
  EXPECT_TRUE(c->WaitClosed());
}

TEST_F(Deepxd, ConnectionsOverTheLimitAreRefused) {
  StartWith(BaseConfig("[server]\nmax_connections = 1\n"));
  // The readiness probe of DaemonProcess::Start was a connection too: wait until it is gone.
  for (int i = 0; i < 500 && daemon_.log().find("session closed") == std::string::npos; ++i)
    usleep(10000);
  auto a = Connected();
  auto b = Connected(false);
  auto r = b->Receive();
  ASSERT_TRUE(r) << b->error();
  EXPECT_EQ(r->status, DX_RESOURCE_EXHAUSTED);
  EXPECT_NE(r->message.find("max_connections"), std::string::npos) << r->message;
  EXPECT_TRUE(b->WaitClosed());
  // The first one is unaffected.
  r = a->Call(wire::request::ListOps(1));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, DX_OK);
}

TEST_F(Deepxd, StartUpErrorsExitOneSayingWhy) {
  StartWith(BaseConfig());
  std::string out;
  // The socket of a live daemon is left alone.
  EXPECT_EQ(DaemonProcess::RunToCompletion(
                kDeepxd, {"--socket", daemon_.socket(), "--plugin", kCpuPlugin}, &out),
            1);
  EXPECT_NE(out.find("another daemon is listening"), std::string::npos) << out;
  // A file that is not a socket is not replaced.
  std::string file = daemon_.dir() + "/plain";
  std::ofstream(file) << "x";
  EXPECT_EQ(DaemonProcess::RunToCompletion(kDeepxd, {"--socket", file, "--plugin", kCpuPlugin},
                                           &out),
            1);
  EXPECT_NE(out.find("is not a socket"), std::string::npos) << out;
  // A directory that does not exist.
  EXPECT_EQ(DaemonProcess::RunToCompletion(
                kDeepxd, {"--socket", daemon_.dir() + "/no/s", "--plugin", kCpuPlugin}, &out),
            1);
  EXPECT_NE(out.find("does not exist"), std::string::npos) << out;
  // A plugin that does not load.
  EXPECT_EQ(DaemonProcess::RunToCompletion(
                kDeepxd, {"--socket", daemon_.dir() + "/t", "--plugin", file}, &out),
            1);
  EXPECT_NE(out.find("loading plugin"), std::string::npos) << out;
  // The first daemon still serves.
  auto c = Connected();
}

TEST_F(Deepxd, CheckConfig) {
  std::string dir = daemon_.dir();
  std::ofstream(dir + "/good.toml") << BaseConfig("[server]\nsocket = \"" + dir +
                                                  "/x.sock\"\nallowed_uids = [0, 1000]\n"
                                                  "[quotas]\nmax_tensors = 10\n");
  std::ofstream(dir + "/unknown.toml") << BaseConfig("[server]\nsokcet = \"/tmp/x\"\n");
  std::ofstream(dir + "/syntax.toml") << "[server\nsocket = 1\n";
  std::ofstream(dir + "/type.toml") << BaseConfig("[quotas]\nmax_tensors = \"ten\"\n");
  std::ofstream(dir + "/noplugin.toml") << "[plugins]\npaths = [\"/nonexistent/libx.so\"]\n";
  std::string out;
  EXPECT_EQ(DaemonProcess::RunToCompletion(kDeepxd, {"--check-config", dir + "/good.toml"}, &out),
            0)
      << out;
  EXPECT_NE(out.find("configuration OK"), std::string::npos) << out;
  EXPECT_EQ(
      DaemonProcess::RunToCompletion(kDeepxd, {"--check-config", dir + "/unknown.toml"}, &out), 1);
  EXPECT_NE(out.find("server.sokcet: unknown key"), std::string::npos) << out;
  EXPECT_EQ(
      DaemonProcess::RunToCompletion(kDeepxd, {"--check-config", dir + "/syntax.toml"}, &out), 1);
  EXPECT_NE(out.find("syntax"), std::string::npos) << out;
  EXPECT_EQ(DaemonProcess::RunToCompletion(kDeepxd, {"--check-config", dir + "/type.toml"}, &out),
            1);
  EXPECT_NE(out.find("quotas.max_tensors: must be an integer"), std::string::npos) << out;
  EXPECT_EQ(
      DaemonProcess::RunToCompletion(kDeepxd, {"--check-config", dir + "/noplugin.toml"}, &out),
      1);
  EXPECT_NE(out.find("/nonexistent/libx.so"), std::string::npos) << out;
  EXPECT_EQ(DaemonProcess::RunToCompletion(kDeepxd, {"--check-config", dir + "/missing.toml"},
                                           &out),
            1);
  EXPECT_EQ(DaemonProcess::RunToCompletion(kDeepxd, {"--no-such-flag"}, &out), 2);
}

}  // namespace
