// libFuzzer target of deepxd's request handler (deepx::daemon::Connection, handler.h): a fresh
// Daemon and session per input, a valid Hello, then the input as the client's byte stream.
//
// Input: byte 0 sets the chunk size the stream is fed in (bits 0..6, plus 1: 1..128 bytes), the
// rest is the stream (frames, docs/protocol.md). The daemon's tensor handles are deterministic
// per input: the n-th handle issued (from 0) is 0x1_0000_0000 + n, so seeds can name them.
// Limits and quotas are small so that the caps are reached.
//
// Besides ASan/UBSan, it checks (and aborts when wrong): every byte the daemon writes is a
// well-formed reply stream (frames, each header a verified Reply, bulk bytes as announced);
// nothing is written after a fatal error; closing the session frees every handle it held.
#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "deepx/daemon/handler.h"

namespace dd = deepx::daemon;
namespace dw = deepx::wire;

namespace {

[[noreturn]] void Wrong(const char* what) {
  std::fprintf(stderr, "fuzz_daemon_handler: %s\n", what);
  std::abort();
}

struct State {
  dd::Config config;
  std::unique_ptr<dd::Logger> log;
  std::unique_ptr<dd::Executor> executor;
};

bool Exists(const char* path) {
  struct stat st{};
  return path && path[0] && ::stat(path, &st) == 0;
}

State* Init() {
  auto* s = new State;
  s->config.limits.max_header_bytes = 4096;
  s->config.limits.max_bulk_frame_bytes = 256;
  s->config.limits.max_bulk_bytes = 4096;
  s->config.quotas.max_tensor_bytes = 1 << 16;
  s->config.quotas.max_tensors = 16;
  s->config.quotas.max_inflight = 8;
  s->config.resume_seconds = 0;  // a session ends with its input
  s->log = std::make_unique<dd::Logger>(dd::LogLevel::kError, nullptr);  // silent
  std::vector<std::string> plugins{DEEPX_FUZZ_PLUGIN};
  const char* ref = std::getenv("DEEPX_FUZZ_REFERENCE_PLUGIN");
  if (!Exists(ref)) ref = DEEPX_FUZZ_REFERENCE_PLUGIN;
  if (Exists(ref)) plugins.push_back(ref);
  dw::Status st;
  s->executor = dd::Executor::Create(plugins, false, *s->log, st);
  if (!s->executor) {
    std::fprintf(stderr, "fuzz_daemon_handler: %s\n", st.message.c_str());
    std::abort();
  }
  return s;
}

// Checks that |out| is a sequence of whole reply messages.
void CheckReplies(const std::vector<uint8_t>& out, const dw::Limits& limits) {
  dw::FrameReader reader(limits);
  if (!reader.Feed(out).ok()) Wrong("the daemon wrote malformed frames");
  if (!reader.Finish().ok()) Wrong("the daemon wrote a frame cut short");
  dw::Frame f;
  uint64_t bulk_left = 0;
  while (reader.Next(f)) {
    if (f.bulk) {
      if (f.payload.size() > bulk_left) Wrong("a bulk frame no reply announced");
      bulk_left -= f.payload.size();
      continue;
    }
    if (bulk_left) Wrong("a reply header where bulk bytes were due");
    if (!dw::VerifyReply(f.payload, limits).ok()) Wrong("a reply that does not verify");
    bulk_left = flatbuffers::GetRoot<dw::fb::Reply>(f.payload.data())->bulk_bytes();
  }
  if (bulk_left) Wrong("a reply's bulk bytes are missing");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static State* state = Init();
  if (size == 0) return 0;
  const size_t chunk = size_t(data[0] & 0x7f) + 1;
  std::span<const uint8_t> stream(data + 1, size - 1);

  dd::Daemon daemon(state->config, *state->executor, *state->log);
  std::vector<uint8_t> out;
  {
    auto conn = daemon.Open("fuzz");
    std::vector<uint8_t> hello;
    if (!dw::EncodeRequest(hello, dw::request::Hello(0, "fuzz"), {}, state->config.limits).ok())
      Wrong("cannot encode the Hello");
    conn->Feed(hello);
    for (size_t i = 0; i < stream.size(); i += chunk) {
      bool was_closing = conn->closing();
      conn->Feed(stream.subspan(i, std::min(chunk, stream.size() - i)));
      std::vector<uint8_t> part = conn->TakeOutput();
      if (was_closing && !part.empty()) Wrong("output after a fatal error");
      out.insert(out.end(), part.begin(), part.end());
    }
    std::vector<uint8_t> part = conn->TakeOutput();
    out.insert(out.end(), part.begin(), part.end());
    conn->Finish();
  }
  // The session is gone: only the shared names may hold tensors.
  if (daemon.live_tensors() != daemon.shared_names())
    Wrong("a closed session left tensor handles behind");
  CheckReplies(out, state->config.limits);
  return 0;
}
