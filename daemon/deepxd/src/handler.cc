// The request handler of deepxd (handler.h): sessions, the handle table, shared names, and
// every request run through the host API in this process.
#include "deepx/daemon/handler.h"

#include <sys/random.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <utility>

namespace deepx::daemon {
namespace {

namespace fb = wire::fb;
using wire::Status;

// Takes ownership of |e| (may be null): its code and message, prefixed with |what|.
Status FromDx(dx_error_t* e, const std::string& what) {
  if (!e) return Status::Ok();
  size_t n = 0;
  const char* m = dx_error_message(e, &n);
  Status s = Status::Error(dx_error_code(e), what + ": " + std::string(m, n));
  dx_error_destroy(e);
  return s;
}

std::string Hex(uint64_t v) {
  static const char* digits = "0123456789abcdef";
  std::string s = "0x";
  bool started = false;
  for (int shift = 60; shift >= 0; shift -= 4) {
    unsigned d = (v >> shift) & 0xf;
    if (d || started || shift == 0) {
      s += digits[d];
      started = true;
    }
  }
  return s;
}

std::string Str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

const char* KindName(int32_t kind) {
  switch (kind) {
    case 0: return "device";
    case 1: return "host";
    case 2: return "pinned";
    case 3: return "managed";
    default: return "unknown";
  }
}

void RuntimeLog(void* user, int32_t level, const char* source, const char* message,
                size_t length) {
  auto* log = static_cast<Logger*>(user);
  LogLevel l = level >= DX_LOG_ERROR  ? LogLevel::kError
               : level == DX_LOG_WARN ? LogLevel::kWarn
               : level == DX_LOG_INFO ? LogLevel::kInfo
                                      : LogLevel::kDebug;
  if (!log->enabled(l)) return;
  log->Log(l, std::string_view(message, length), 0, 0, {{"source", source ? source : ""}});
}

// Bytes of one element of the tensor's dtype and its element count.
Status TensorBytes(const dx_tensor_t* t, uint64_t* out_bytes) {
  const DLTensor* dl = nullptr;
  Status s = FromDx(dx_tensor_dltensor(t, &dl), "dx_tensor_dltensor");
  if (!s.ok()) return s;
  int64_t numel = 0;
  s = FromDx(dx_tensor_numel(t, &numel), "dx_tensor_numel");
  if (!s.ok()) return s;
  uint64_t bits = uint64_t{dl->dtype.bits} * dl->dtype.lanes;
  if (bits == 0 || bits % 8 != 0)
    return Status::Error(DX_UNSUPPORTED, "a dtype of " + std::to_string(bits) +
                                             " bits per element has no byte size");
  uint64_t el = bits / 8;
  if (numel < 0 || (numel > 0 && uint64_t(numel) > std::numeric_limits<uint64_t>::max() / el))
    return Status::Error(DX_OUT_OF_RANGE, "tensor size overflows 64 bits");
  *out_bytes = uint64_t(numel) * el;
  return Status::Ok();
}

}  // namespace

// ---- Executor -------------------------------------------------------------------------------

std::unique_ptr<Executor> Executor::Create(const std::vector<std::string>& plugins,
                                           bool require_certified, Logger& log, Status& error) {
  std::unique_ptr<Executor> ex(new Executor());
  dx_runtime_options_t o{};
  o.struct_size = DX_RUNTIME_OPTIONS_SIZE_1_0;
  o.flags = DX_RUNTIME_FLAG_IGNORE_ENV | (require_certified ? DX_RUNTIME_FLAG_REQUIRE_CERTIFIED : 0);
  o.log = &RuntimeLog;
  o.log_user_data = &log;
  error = FromDx(dx_runtime_create(&o, &ex->runtime_), "dx_runtime_create");
  if (!error.ok()) return nullptr;
  for (const std::string& p : plugins) {
    error = FromDx(dx_runtime_load_plugin(ex->runtime_, p.c_str(), nullptr),
                   "loading plugin '" + p + "'");
    if (!error.ok()) return nullptr;
  }
  error = ex->ReadCatalogue();
  if (!error.ok()) return nullptr;
  return ex;
}

Executor::~Executor() {
  if (runtime_) dx_error_destroy(dx_runtime_destroy(runtime_));
}

Status Executor::LoadPlugin(const std::string& plugin) {
  Status s = FromDx(dx_runtime_load_plugin(runtime_, plugin.c_str(), nullptr),
                    "loading plugin '" + plugin + "'");
  Status c = ReadCatalogue();
  return s.ok() ? c : s;
}

Status Executor::ReadCatalogue() {
  plugins_.clear();
  devices_.clear();
  ops_.clear();
  kernels_.clear();
  int32_t np = 0, nd = 0, nops = 0;
  Status s = FromDx(dx_runtime_plugin_count(runtime_, &np), "dx_runtime_plugin_count");
  if (!s.ok()) return s;
  std::vector<std::string> plugin_names;
  for (int32_t i = 0; i < np; ++i) {
    dx_plugin_info_t info{};
    info.struct_size = DX_PLUGIN_INFO_SIZE_1_0;
    s = FromDx(dx_runtime_plugin_info(runtime_, i, &info), "dx_runtime_plugin_info");
    if (!s.ok()) return s;
    plugins_.push_back({info.name ? info.name : "", info.version ? info.version : "",
                        info.certification == DX_CERTIFICATION_VALID});
    plugin_names.push_back(plugins_.back().name);
  }
  s = FromDx(dx_runtime_device_count(runtime_, &nd), "dx_runtime_device_count");
  if (!s.ok()) return s;
  std::vector<dx_device_info_t> devs;
  for (int32_t i = 0; i < nd; ++i) {
    dx_device_info_t info{};
    info.struct_size = DX_DEVICE_INFO_SIZE_1_0;
    s = FromDx(dx_runtime_device_info(runtime_, i, &info), "dx_runtime_device_info");
    if (!s.ok()) return s;
    devs.push_back(info);
    std::string plugin = info.plugin_index >= 0 && info.plugin_index < np
                             ? plugin_names[info.plugin_index]
                             : std::string();
    devices_.push_back({info.name ? info.name : "", plugin, KindName(info.kind)});
  }
  s = FromDx(dx_runtime_op_count(runtime_, &nops), "dx_runtime_op_count");
  if (!s.ok()) return s;
  for (int32_t id = 0; id < nops; ++id) {
    const char* name = nullptr;
    s = FromDx(dx_runtime_op_name(runtime_, dx_op_id_t(id), &name), "dx_runtime_op_name");
    if (!s.ok()) return s;
    int32_t nk = 0;
    s = FromDx(dx_runtime_kernel_count(runtime_, dx_op_id_t(id), &nk), "dx_runtime_kernel_count");
    if (!s.ok()) return s;
    if (nk == 0) continue;  // interned but implemented by no loaded plugin
    ops_.push_back(name ? name : "");
    for (int32_t k = 0; k < nk; ++k) {
      dx_kernel_info_t ki{};
      ki.struct_size = DX_KERNEL_INFO_SIZE_1_0;
      s = FromDx(dx_runtime_kernel_info(runtime_, dx_op_id_t(id), k, &ki),
                 "dx_runtime_kernel_info");
      if (!s.ok()) return s;
      wire::KernelEntry e;
      e.op = ops_.back();
      e.plugin = ki.plugin_index >= 0 && ki.plugin_index < np ? plugin_names[ki.plugin_index] : "";
      // The device: the first memory space of the kernel's plugin with its device type.
      e.device = "dlpack-device-type-" + std::to_string(ki.device_type);
      for (const dx_device_info_t& d : devs) {
        if (d.plugin_index == ki.plugin_index && d.device_type == ki.device_type && d.name) {
          e.device = d.name;
          break;
        }
      }
      for (int32_t j = 0; j < ki.num_dtypes && ki.dtypes; ++j) e.dtypes.push_back(ki.dtypes[j]);
      e.certified = ki.certified != 0;
      kernels_.push_back(std::move(e));
    }
  }
  return Status::Ok();
}

// ---- Daemon ---------------------------------------------------------------------------------

Daemon::Daemon(const Config& config, Executor& executor, Logger& log)
    : config_(config), executor_(executor), log_(log) {}

Daemon::~Daemon() {
  for (Slot& s : slots_)
    if (s.owner) dx_error_destroy(dx_tensor_destroy(s.tensor));
  for (auto& [name, t] : names_) dx_error_destroy(dx_tensor_destroy(t));
}

size_t Daemon::live_tensors() const {
  size_t n = names_.size();
  for (const Slot& s : slots_) n += s.owner != 0;
  return n;
}

std::unique_ptr<Connection> Daemon::Open(const std::string& peer, uint32_t uid) {
  ExpireDetached();
  auto state = std::make_unique<SessionState>();
  state->id = next_session_++;
  state->uid = uid;
  SessionState* raw = state.get();
  sessions_.emplace(raw->id, std::move(state));
  ++stats_.sessions_opened;
  ++stats_.sessions_open;
  metrics_.SessionOpened();
  return std::unique_ptr<Connection>(new Connection(*this, raw, peer));
}

void Daemon::EndSession(uint64_t id, const char* why) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  size_t freed = 0;
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].owner == id) {
      FreeSlot(i);
      ++freed;
    }
  }
  const SessionStats& st = it->second->stats;
  log_.Log(LogLevel::kInfo, std::string("session closed: ") + why, id, 0,
           {{"tensors_freed", std::to_string(freed)},
            {"tasks_completed", std::to_string(st.tasks_completed)},
            {"tasks_failed", std::to_string(st.tasks_failed)}});
  sessions_.erase(it);
  --stats_.sessions_open;
  metrics_.SessionClosed();
}

size_t Daemon::ExpireDetached() {
  auto now = std::chrono::steady_clock::now();
  std::vector<uint64_t> expired;
  for (auto& [id, s] : sessions_)
    if (s->detached && s->expires <= now) expired.push_back(id);
  for (uint64_t id : expired) EndSession(id, "not resumed within server.resume_seconds");
  return expired.size();
}

size_t Daemon::detached_sessions() const {
  size_t n = 0;
  for (auto& [id, s] : sessions_) n += s->detached;
  return n;
}

uint64_t Daemon::AddSlot(uint64_t owner, dx_tensor_t* tensor, uint64_t bytes) {
  uint32_t index;
  if (!free_slots_.empty()) {
    index = free_slots_.back();
    free_slots_.pop_back();
  } else {
    index = uint32_t(slots_.size());
    slots_.push_back({});
  }
  Slot& s = slots_[index];
  s.owner = owner;
  s.tensor = tensor;
  s.bytes = bytes;
  s.device = -1;
  if (bytes > 0) {
    int32_t dev = -1;
    dx_error_t* e = dx_tensor_device(tensor, &dev);
    dx_error_destroy(e);
    const auto& devices = executor_.devices();
    if (!e && dev >= 0 && size_t(dev) < devices.size()) {
      s.device = dev;
      metrics_.TensorBytes(devices[dev].name, devices[dev].kind, int64_t(bytes));
    }
  }
  return wire::MakeHandle(index, s.generation);
}

void Daemon::Reconfigure(const Config& config) {
  config_.quotas = config.quotas;
  config_.log_level = config.log_level;
  config_.resume_seconds = config.resume_seconds;
  log_.set_level(config.log_level);
}

void Daemon::FreeSlot(uint32_t index) {
  Slot& s = slots_[index];
  if (s.device >= 0 && s.bytes > 0) {
    const wire::DeviceEntry& d = executor_.devices()[s.device];
    metrics_.TensorBytes(d.name, d.kind, -int64_t(s.bytes));
  }
  s.device = -1;
  dx_error_destroy(dx_tensor_destroy(s.tensor));
  s.tensor = nullptr;
  s.owner = 0;
  s.bytes = 0;
  // A new generation: every handle of the slot so far is stale. A slot whose generation
  // would wrap is retired rather than reused.
  if (++s.generation == 0) return;
  free_slots_.push_back(index);
}

Status Daemon::Lookup(uint64_t owner, uint64_t handle, Slot** out) {
  if (handle == 0)
    return Status::Error(DX_INVALID_ARGUMENT, "tensor handle 0 is never a valid handle");
  uint32_t index = wire::HandleIndex(handle), gen = wire::HandleGeneration(handle);
  if (index >= slots_.size() || slots_[index].generation != gen || slots_[index].owner == 0)
    return Status::Error(DX_NOT_FOUND, "tensor handle " + Hex(handle) +
                                           " is stale or unknown (freed, or never issued)");
  if (slots_[index].owner != owner)
    return Status::Error(DX_PERMISSION_DENIED,
                         "tensor handle " + Hex(handle) +
                             " belongs to another session (share tensors by TensorName)");
  *out = &slots_[index];
  return Status::Ok();
}

// ---- Connection -----------------------------------------------------------------------------

Connection::Connection(Daemon& daemon, Daemon::SessionState* state, std::string peer)
    : daemon_(daemon),
      state_(state),
      session_(state->id),
      peer_(std::move(peer)),
      decoder_(wire::Role::kServer, daemon.config().limits) {
  daemon_.log().Log(LogLevel::kInfo, "session opened", session_, 0, {{"peer", peer_}});
}

Connection::~Connection() {
  if (state_->token != 0 && daemon_.config().resume_seconds > 0) {
    // Kept for a resume: a Hello with the token within the grace period takes it back.
    state_->detached = true;
    state_->expires = std::chrono::steady_clock::now() +
                      std::chrono::milliseconds(int64_t(daemon_.config().resume_seconds * 1000));
    daemon_.log().Log(LogLevel::kInfo, "session detached, resumable", session_, 0,
                      {{"resume_seconds", std::to_string(daemon_.config().resume_seconds)}});
    return;
  }
  daemon_.EndSession(session_, "connection closed");
}

void Connection::Reply(std::span<const uint8_t> header, std::span<const uint8_t> bulk) {
  Status s = wire::EncodeReply(out_, header, bulk, daemon_.config().limits);
  if (!s.ok()) {
    // Only a reply over our own caps gets here (a list longer than max_header_bytes).
    auto* r = flatbuffers::GetRoot<fb::Reply>(header.data());
    auto err = wire::reply::Error(r->task_id(), s.code, "the reply cannot be sent: " + s.message);
    (void)wire::EncodeReply(out_, err, {}, daemon_.config().limits);
  }
}

void Connection::PushOut() {
  if (out_.empty()) return;
  auto owned = std::make_shared<std::vector<uint8_t>>(std::move(out_));
  out_ = {};
  pieces_.push_back(OutPiece{owned, owned->data(), owned->size()});
}

void Connection::ReplyShared(std::span<const uint8_t> header, std::shared_ptr<const void> keep,
                             std::span<const uint8_t> bulk) {
  const wire::Limits& limits = daemon_.config().limits;
  Status s = wire::EncodeReplyHeader(out_, header, bulk.size(), limits);
  if (!s.ok()) {
    auto* r = flatbuffers::GetRoot<fb::Reply>(header.data());
    auto err = wire::reply::Error(r->task_id(), s.code, "the reply cannot be sent: " + s.message);
    (void)wire::EncodeReply(out_, err, {}, limits);
    return;
  }
  // The frame headers in one buffer of their own; the payloads point into |bulk|.
  const uint64_t frames = wire::BulkFrameCount(bulk.size(), limits);
  auto heads = std::make_shared<std::vector<uint8_t>>(frames * wire::kFrameHeaderBytes);
  PushOut();
  for (uint64_t i = 0, at = 0; i < frames; ++i) {
    const size_t n = std::min<uint64_t>(limits.max_bulk_frame_bytes, bulk.size() - at);
    uint8_t* h = heads->data() + i * wire::kFrameHeaderBytes;
    wire::WriteFrameHeader(h, true, static_cast<uint32_t>(n));
    pieces_.push_back(OutPiece{heads, h, wire::kFrameHeaderBytes});
    pieces_.push_back(OutPiece{keep, bulk.data() + at, n});
    at += n;
  }
}

std::vector<Connection::OutPiece> Connection::TakeOutputPieces() {
  PushOut();
  return std::move(pieces_);
}

std::vector<uint8_t> Connection::TakeOutput() {
  if (pieces_.empty()) return std::move(out_);
  std::vector<uint8_t> all;
  for (const OutPiece& p : TakeOutputPieces()) all.insert(all.end(), p.data, p.data + p.size);
  return all;
}

std::span<uint8_t> Connection::BulkWindow() {
  if (closing_) return {};
  return decoder_.BulkWindow();
}

void Connection::CommitBulk(size_t n) {
  if (closing_) return;
  std::vector<wire::Event> events;
  decoder_.CommitBulk(n, events);
  OnEvents(events);
}

void Connection::Begin(const wire::Message& m) {
  const fb::Request* r = m.request();
  cur_request_ = fb::EnumNameRequestBody(r->body_type());
  cur_task_ = m.task_id;
  cur_op_.clear();
  if (r->body_type() == fb::RequestBody::Invoke) {
    // Only ops the daemon serves become label values: a client cannot grow the metrics.
    std::string op = Str(r->body_as_Invoke()->op());
    const auto& ops = daemon_.executor_.ops();
    cur_op_ = std::find(ops.begin(), ops.end(), op) != ops.end() ? op : "(unknown)";
  }
  cur_start_ = std::chrono::steady_clock::now();
}

void Connection::Count(dx_status_t code) {
  const bool ok = code == DX_OK;
  double seconds = cur_start_ == std::chrono::steady_clock::time_point{}
                       ? 0.0
                       : std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                       cur_start_)
                             .count();
  daemon_.metrics_.TaskDone(cur_request_, cur_op_, wire::StatusName(code), seconds);
  if (ok) {
    ++state_->stats.tasks_completed;
    ++daemon_.stats_.tasks_completed;
  } else {
    ++state_->stats.tasks_failed;
    ++daemon_.stats_.tasks_failed;
  }
}

void Connection::ReplyError(uint64_t task, const Status& status) {
  Count(status.code);
  daemon_.log().Log(LogLevel::kDebug, status.message, session_, task,
                    {{"status", wire::StatusName(status.code)}});
  Reply(wire::reply::Error(task, status.code, status.message));
}

void Connection::ReplyOk(const std::vector<uint8_t>& header) {
  Count(DX_OK);
  Reply(header);
}

void Connection::Feed(std::span<const uint8_t> data) {
  if (closing_) return;
  std::vector<wire::Event> events;
  decoder_.Feed(data, events);
  OnEvents(events);
}

void Connection::OnEvents(std::vector<wire::Event>& events) {
  for (wire::Event& e : events) {
    if (e.kind == wire::Event::Kind::kError) {
      ++state_->stats.protocol_errors;
      ++daemon_.stats_.protocol_errors;
      daemon_.metrics_.ProtocolError(wire::StatusName(e.error.code));
      daemon_.log().Log(e.fatal ? LogLevel::kWarn : LogLevel::kDebug,
                        e.fatal ? "protocol error, closing: " + e.error.message
                                : "protocol error: " + e.error.message,
                        session_, e.task_id, {{"status", wire::StatusName(e.error.code)}});
      if (e.fatal) {
        // The requests before the break in the stream are sound: answer them first.
        RunQueue();
        Reply(wire::reply::Error(e.task_id, e.error.code, e.error.message));
        closing_ = true;
        break;
      }
      Reply(wire::reply::Error(e.task_id, e.error.code, e.error.message));
      continue;
    }
    Enqueue(std::move(e.message));
  }
  RunQueue();
}

void Connection::Finish() {
  Status s = decoder_.Finish();
  if (!s.ok() && !closing_)
    daemon_.log().Log(LogLevel::kInfo, "stream ended: " + s.message, session_);
}

void Connection::Enqueue(wire::Message&& message) {
  const fb::Request* r = message.request();
  Begin(message);
  if (r->body_type() == fb::RequestBody::Cancel) {
    // Acts on the queue at once, ahead of the work it may cancel.
    Status s = DoCancel(*r->body_as_Cancel());
    if (s.ok())
      ReplyOk(wire::reply::Ok(message.task_id));
    else
      ReplyError(message.task_id, s);
    return;
  }
  const uint32_t cap = daemon_.config().quotas.max_inflight;
  if (queue_.size() >= cap) {
    ReplyError(message.task_id,
               Status::Error(DX_RESOURCE_EXHAUSTED,
                             "quota: " + std::to_string(cap) +
                                 " requests of this session are in flight already "
                                 "(quotas.max_inflight); wait for replies before sending more"));
    return;
  }
  queue_.push_back({std::move(message), false});
}

Status Connection::DoCancel(const fb::Cancel& req) {
  for (Queued& q : queue_) {
    if (q.message.task_id == req.task_id() && !q.cancelled) {
      q.cancelled = true;
      return Status::Ok();
    }
  }
  return Status::Error(DX_NOT_FOUND, "nothing to cancel: task " + std::to_string(req.task_id()) +
                                         " of this session is not queued (already answered, "
                                         "running, or never sent)");
}

void Connection::RunQueue() {
  if (running_) return;
  running_ = true;
  while (!queue_.empty()) {
    if (closing_) {  // a fatal answer: what was queued behind it is dropped with the connection
      queue_.clear();
      break;
    }
    Queued q = std::move(queue_.front());
    queue_.pop_front();
    if (q.cancelled) {
      Begin(q.message);
      ReplyError(q.message.task_id,
                 Status::Error(DX_CANCELLED, "task " + std::to_string(q.message.task_id) +
                                                 " was cancelled before it ran"));
      continue;
    }
    Execute(q.message);
  }
  running_ = false;
}

void Connection::Execute(const wire::Message& m) {
  const fb::Request* r = m.request();
  const uint64_t task = m.task_id;
  Begin(m);
  Executor& ex = daemon_.executor_;
  std::vector<uint8_t> reply;
  std::shared_ptr<const void> bulk_keep;
  std::span<const uint8_t> bulk;
  Status s;
  switch (r->body_type()) {
    case fb::RequestBody::Hello:
      s = DoHello(task, *r->body_as_Hello(), reply);
      break;
    case fb::RequestBody::ListPlugins:
      reply = wire::reply::PluginList(task, ex.plugins());
      break;
    case fb::RequestBody::ListOps:
      reply = wire::reply::OpList(task, ex.ops());
      break;
    case fb::RequestBody::ListDevices:
      reply = wire::reply::DeviceList(task, ex.devices());
      break;
    case fb::RequestBody::ListKernels:
      s = DoListKernels(task, *r->body_as_ListKernels(), reply);
      break;
    case fb::RequestBody::TensorCreate:
      s = DoTensorCreate(task, *r->body_as_TensorCreate(), reply);
      break;
    case fb::RequestBody::TensorFree:
      s = DoTensorFree(*r->body_as_TensorFree());
      break;
    case fb::RequestBody::TensorWrite:
      s = DoTensorWrite(*r->body_as_TensorWrite(), m.bulk);
      break;
    case fb::RequestBody::TensorRead:
      s = DoTensorRead(*r->body_as_TensorRead(), bulk_keep, bulk);
      if (s.ok()) reply = wire::reply::Ok(task, bulk.size());
      break;
    case fb::RequestBody::TensorCopy:
      s = DoTensorCopy(*r->body_as_TensorCopy());
      break;
    case fb::RequestBody::TensorView:
      s = DoTensorView(task, *r->body_as_TensorView(), reply);
      break;
    case fb::RequestBody::TensorName:
      s = DoTensorName(*r->body_as_TensorName());
      break;
    case fb::RequestBody::TensorOpen:
      s = DoTensorOpen(task, *r->body_as_TensorOpen(), reply);
      break;
    case fb::RequestBody::TensorUnname:
      s = DoTensorUnname(*r->body_as_TensorUnname());
      break;
    case fb::RequestBody::Invoke:
      s = DoInvoke(*r->body_as_Invoke());
      break;
    case fb::RequestBody::Submit: {
      auto* ops = r->body_as_Submit()->ops();
      uint32_t done = 0;
      if (ops) {
        for (uint32_t i = 0; i < ops->size(); ++i) {
          s = DoInvoke(*ops->Get(i));
          if (!s.ok()) {
            s.message = "op " + std::to_string(i) + " of the program: " + s.message;
            break;
          }
          ++done;
        }
      }
      Count(s.code);
      if (!s.ok())
        daemon_.log().Log(LogLevel::kDebug, s.message, session_, task,
                          {{"status", wire::StatusName(s.code)}});
      Reply(wire::reply::SubmitResult(task, s.code, s.message, done));
      return;
    }
    case fb::RequestBody::Stats: {
      wire::StatsDesc d;
      d.tensors = state_->stats.tensors;
      d.bytes_allocated = state_->stats.bytes_allocated;
      d.tasks_completed = state_->stats.tasks_completed;
      d.tasks_failed = state_->stats.tasks_failed;
      d.protocol_errors = state_->stats.protocol_errors;
      reply = wire::reply::Stats(task, d);
      break;
    }
    case fb::RequestBody::Cancel:  // handled in Enqueue
    default:
      s = Status::Error(DX_UNSUPPORTED, "request type " +
                                            std::to_string(int(r->body_type())) +
                                            " is not served by this daemon");
      break;
  }
  if (!s.ok()) {
    ReplyError(task, s);
    return;
  }
  if (reply.empty()) reply = wire::reply::Ok(task);
  Count(DX_OK);
  if (bulk.empty())
    Reply(reply);
  else
    ReplyShared(reply, std::move(bulk_keep), bulk);
}

Status Connection::DoHello(uint64_t task, const fb::Hello& req, std::vector<uint8_t>& reply) {
  daemon_.log().Log(LogLevel::kInfo, "hello", session_, task,
                    {{"client", Str(req.client_name())},
                     {"version", std::to_string(req.major()) + "." + std::to_string(req.minor())},
                     {"resume", req.resume_token() ? "yes" : "no"}});
  bool resumed = false;
  if (req.resume_token() != 0) {
    Daemon::SessionState* found = nullptr;
    for (auto& [id, st] : daemon_.sessions_)
      if (st->token == req.resume_token()) found = st.get();
    if (!found || found->uid != state_->uid) {
      closing_ = true;  // the client asked for a session it cannot have: it starts again
      return Status::Error(DX_NOT_FOUND,
                           "no session to resume with this token (its grace period, "
                           "server.resume_seconds, is over or it never existed): connect again "
                           "without a token for a new session");
    }
    if (!found->detached) {
      closing_ = true;
      return Status::Error(DX_FAILED_PRECONDITION,
                           "the session of this token is in use by another connection");
    }
    // Take the session back; the fresh one of this connection holds nothing yet.
    uint64_t fresh = session_;
    found->detached = false;
    state_ = found;
    session_ = found->id;
    daemon_.EndSession(fresh, "replaced by a resumed session");
    resumed = true;
    daemon_.log().Log(LogLevel::kInfo, "session resumed", session_, task, {{"peer", peer_}});
  } else if (daemon_.config().resume_seconds > 0) {
    uint64_t token = 0;
    while (token == 0) {
      if (::getrandom(&token, sizeof token, 0) != sizeof token) {
        token = 0;
        break;  // no randomness: the session is simply not resumable
      }
    }
    state_->token = token;
  }
  reply = wire::reply::Hello(task, "deepxd", wire::kProtocolMajor, wire::kProtocolMinor,
                             state_->token, resumed);
  return Status::Ok();
}

Status Connection::DoListKernels(uint64_t task, const fb::ListKernels& req,
                                 std::vector<uint8_t>& reply) {
  std::string op = Str(req.op()), plugin = Str(req.plugin());
  std::vector<wire::KernelEntry> out;
  for (const wire::KernelEntry& k : daemon_.executor_.kernels())
    if ((op.empty() || k.op == op) && (plugin.empty() || k.plugin == plugin)) out.push_back(k);
  reply = wire::reply::KernelList(task, out);
  return Status::Ok();
}

Status Connection::AddTensor(dx_tensor_t* tensor, uint64_t bytes, uint64_t* out_handle) {
  const Quotas& q = daemon_.config().quotas;
  if (state_->stats.tensors >= q.max_tensors) {
    dx_error_destroy(dx_tensor_destroy(tensor));
    return Status::Error(DX_RESOURCE_EXHAUSTED,
                         "quota: the session holds " + std::to_string(state_->stats.tensors) +
                             " tensor handles, the limit (quotas.max_tensors) is " +
                             std::to_string(q.max_tensors));
  }
  *out_handle = daemon_.AddSlot(session_, tensor, bytes);
  ++state_->stats.tensors;
  state_->stats.bytes_allocated += bytes;
  return Status::Ok();
}

Status Connection::Describe(uint64_t task, uint64_t handle, dx_tensor_t* t,
                            std::vector<uint8_t>& reply) {
  const DLTensor* dl = nullptr;
  Status s = FromDx(dx_tensor_dltensor(t, &dl), "dx_tensor_dltensor");
  if (!s.ok()) return s;
  dx_dtype_t dtype = 0;
  s = FromDx(dx_tensor_dtype(t, &dtype), "dx_tensor_dtype");
  if (!s.ok()) return s;
  int32_t dev = -1;
  s = FromDx(dx_tensor_device(t, &dev), "dx_tensor_device");
  if (!s.ok()) return s;
  wire::TensorDesc d;
  d.tensor = handle;
  d.dtype = dtype;
  d.shape.assign(dl->shape, dl->shape + dl->ndim);
  d.strides.resize(dl->ndim);
  int64_t stride = 1;
  for (int i = dl->ndim - 1; i >= 0; --i) {
    d.strides[i] = dl->strides ? dl->strides[i] : stride;
    stride *= dl->shape[i];
  }
  const auto& devices = daemon_.executor_.devices();
  if (dev >= 0 && size_t(dev) < devices.size()) d.device = devices[dev].name;
  reply = wire::reply::TensorInfo(task, d);
  return Status::Ok();
}

Status Connection::DoTensorCreate(uint64_t task, const fb::TensorCreate& req,
                                  std::vector<uint8_t>& reply) {
  dx_runtime_t* rt = daemon_.executor_.runtime();
  std::string device = Str(req.device());
  int32_t index = 0;
  if (device.empty()) {
    if (daemon_.executor_.devices().empty())
      return Status::Error(DX_NOT_FOUND, "TensorCreate: the daemon has no device");
  } else {
    Status s = FromDx(dx_runtime_find_device(rt, device.c_str(), &index),
                      "TensorCreate: device '" + device + "'");
    if (!s.ok()) return s;
  }
  std::vector<int64_t> shape;
  if (req.shape()) shape.assign(req.shape()->begin(), req.shape()->end());
  // Charge the quota before allocating: the size from the dtype and the shape.
  uint64_t bits = uint64_t((req.dtype() >> 8) & 0xff) * ((req.dtype() >> 16) & 0xffff);
  uint64_t bytes = bits / 8;
  for (int64_t e : shape) {
    if (e < 0) return Status::Error(DX_INVALID_ARGUMENT, "TensorCreate: a negative extent");
    if (e > 0 && bytes > std::numeric_limits<uint64_t>::max() / uint64_t(e))
      return Status::Error(DX_OUT_OF_RANGE, "TensorCreate: the tensor's size overflows 64 bits");
    bytes *= uint64_t(e);
  }
  const Quotas& q = daemon_.config().quotas;
  if (bytes > q.max_tensor_bytes - std::min(q.max_tensor_bytes, state_->stats.bytes_allocated))
    return Status::Error(DX_RESOURCE_EXHAUSTED,
                         "quota: " + std::to_string(bytes) + " more bytes would pass the " +
                             "session's limit of " + std::to_string(q.max_tensor_bytes) +
                             " (quotas.max_tensor_bytes; " +
                             std::to_string(state_->stats.bytes_allocated) + " in use)");
  dx_tensor_t* t = nullptr;
  Status s = FromDx(dx_tensor_create(rt, index, req.dtype(), shape.data(), int32_t(shape.size()), &t),
                    "TensorCreate");
  if (!s.ok()) return s;
  uint64_t actual = 0;
  s = TensorBytes(t, &actual);
  if (!s.ok()) {
    dx_error_destroy(dx_tensor_destroy(t));
    return s;
  }
  uint64_t handle = 0;
  s = AddTensor(t, actual, &handle);
  if (!s.ok()) return s;
  return Describe(task, handle, t, reply);
}

Status Connection::DoTensorFree(const fb::TensorFree& req) {
  Daemon::Slot* slot = nullptr;
  uint64_t h = req.tensor() ? req.tensor()->value() : 0;
  Status s = daemon_.Lookup(session_, h, &slot);
  if (!s.ok()) return s;
  state_->stats.bytes_allocated -= slot->bytes;
  --state_->stats.tensors;
  daemon_.FreeSlot(wire::HandleIndex(h));
  return Status::Ok();
}

Status Connection::DoTensorWrite(const fb::TensorWrite& req, std::span<const uint8_t> bulk) {
  Daemon::Slot* slot = nullptr;
  Status s = daemon_.Lookup(session_, req.tensor() ? req.tensor()->value() : 0, &slot);
  if (!s.ok()) return s;
  uint64_t total = 0;
  s = TensorBytes(slot->tensor, &total);
  if (!s.ok()) return s;
  uint64_t off = req.offset();
  if (off > total || bulk.size() > total - off)
    return Status::Error(DX_OUT_OF_RANGE, "TensorWrite: " + std::to_string(bulk.size()) +
                                              " bytes at offset " + std::to_string(off) +
                                              " pass the tensor's " + std::to_string(total) +
                                              " bytes");
  if (off == 0 && bulk.size() == total)
    return FromDx(dx_tensor_write(slot->tensor, bulk.data(), total), "TensorWrite");
  // A part: read the whole, patch, write back (any device, any strides).
  std::vector<uint8_t> whole(total);
  s = FromDx(dx_tensor_read(slot->tensor, whole.data(), total), "TensorWrite (reading)");
  if (!s.ok()) return s;
  if (!bulk.empty()) std::memcpy(whole.data() + off, bulk.data(), bulk.size());
  return FromDx(dx_tensor_write(slot->tensor, whole.data(), total), "TensorWrite");
}

Status Connection::DoTensorRead(const fb::TensorRead& req, std::shared_ptr<const void>& keep,
                                std::span<const uint8_t>& bulk) {
  Daemon::Slot* slot = nullptr;
  Status s = daemon_.Lookup(session_, req.tensor() ? req.tensor()->value() : 0, &slot);
  if (!s.ok()) return s;
  uint64_t total = 0;
  s = TensorBytes(slot->tensor, &total);
  if (!s.ok()) return s;
  uint64_t off = req.offset(), len = req.length();
  if (off > total || len > total - off)
    return Status::Error(DX_OUT_OF_RANGE, "TensorRead: " + std::to_string(len) +
                                              " bytes at offset " + std::to_string(off) +
                                              " pass the tensor's " + std::to_string(total) +
                                              " bytes");
  if (len > daemon_.config().limits.max_bulk_bytes)
    return Status::Error(DX_OUT_OF_RANGE, "TensorRead: " + std::to_string(len) +
                                              " bytes are more than one message carries "
                                              "(limits.max_bulk_bytes); read in parts");
  if (len == 0) return Status::Ok();
  // A copy of the tensor's bytes (not zero-filled), sent from where it lies and freed once
  // written: a TensorFree pipelined after this read does not reach it.
  std::shared_ptr<uint8_t[]> whole(new (std::nothrow) uint8_t[total]);
  if (!whole)
    return Status::Error(DX_RESOURCE_EXHAUSTED,
                         "TensorRead: no memory for " + std::to_string(total) + " bytes");
  s = FromDx(dx_tensor_read(slot->tensor, whole.get(), total), "TensorRead");
  if (!s.ok()) return s;
  bulk = std::span<const uint8_t>(whole.get() + off, static_cast<size_t>(len));
  keep = std::move(whole);
  return Status::Ok();
}

Status Connection::DoTensorCopy(const fb::TensorCopy& req) {
  Daemon::Slot *src = nullptr, *dst = nullptr;
  Status s = daemon_.Lookup(session_, req.src() ? req.src()->value() : 0, &src);
  if (!s.ok()) return s;
  s = daemon_.Lookup(session_, req.dst() ? req.dst()->value() : 0, &dst);
  if (!s.ok()) return s;
  return FromDx(dx_tensor_copy(daemon_.executor_.runtime(), dst->tensor, src->tensor),
                "TensorCopy");
}

Status Connection::DoTensorView(uint64_t task, const fb::TensorView& req,
                                std::vector<uint8_t>& reply) {
  Daemon::Slot* base = nullptr;
  Status s = daemon_.Lookup(session_, req.base() ? req.base()->value() : 0, &base);
  if (!s.ok()) return s;
  std::vector<int64_t> shape, strides;
  if (req.shape()) shape.assign(req.shape()->begin(), req.shape()->end());
  if (req.strides()) strides.assign(req.strides()->begin(), req.strides()->end());
  if (!strides.empty() && strides.size() != shape.size())
    return Status::Error(DX_INVALID_ARGUMENT, "TensorView: " + std::to_string(strides.size()) +
                                                  " strides for a shape of rank " +
                                                  std::to_string(shape.size()));
  dx_tensor_t* t = nullptr;
  s = FromDx(dx_tensor_view(base->tensor, shape.data(), strides.empty() ? nullptr : strides.data(),
                            int32_t(shape.size()), req.element_offset(), &t),
             "TensorView");
  if (!s.ok()) return s;
  uint64_t handle = 0;
  s = AddTensor(t, 0, &handle);
  if (!s.ok()) return s;
  return Describe(task, handle, t, reply);
}

namespace {
// The same view of |t|'s storage, as a new tensor handle.
Status Duplicate(dx_tensor_t* t, dx_tensor_t** out) {
  const DLTensor* dl = nullptr;
  Status s = FromDx(dx_tensor_dltensor(t, &dl), "dx_tensor_dltensor");
  if (!s.ok()) return s;
  return FromDx(dx_tensor_view(t, dl->shape, dl->strides, dl->ndim, 0, out), "dx_tensor_view");
}
}  // namespace

Status Connection::DoTensorName(const fb::TensorName& req) {
  Daemon::Slot* slot = nullptr;
  Status s = daemon_.Lookup(session_, req.tensor() ? req.tensor()->value() : 0, &slot);
  if (!s.ok()) return s;
  std::string name = Str(req.name());
  if (name.empty()) return Status::Error(DX_INVALID_ARGUMENT, "TensorName: an empty name");
  if (daemon_.names_.count(name))
    return Status::Error(DX_ALREADY_EXISTS, "TensorName: the name '" + name +
                                                "' is taken (TensorUnname it first)");
  dx_tensor_t* shared = nullptr;
  s = Duplicate(slot->tensor, &shared);
  if (!s.ok()) return s;
  daemon_.names_.emplace(name, shared);
  daemon_.log().Log(LogLevel::kInfo, "tensor named", session_, cur_task_, {{"name", name}});
  return Status::Ok();
}

Status Connection::DoTensorOpen(uint64_t task, const fb::TensorOpen& req,
                                std::vector<uint8_t>& reply) {
  std::string name = Str(req.name());
  auto it = daemon_.names_.find(name);
  if (it == daemon_.names_.end())
    return Status::Error(DX_NOT_FOUND, "TensorOpen: no tensor is shared as '" + name + "'");
  dx_tensor_t* t = nullptr;
  Status s = Duplicate(it->second, &t);
  if (!s.ok()) return s;
  uint64_t handle = 0;
  s = AddTensor(t, 0, &handle);
  if (!s.ok()) return s;
  return Describe(task, handle, t, reply);
}

Status Connection::DoTensorUnname(const fb::TensorUnname& req) {
  std::string name = Str(req.name());
  auto it = daemon_.names_.find(name);
  if (it == daemon_.names_.end())
    return Status::Error(DX_NOT_FOUND, "TensorUnname: no tensor is shared as '" + name + "'");
  dx_error_destroy(dx_tensor_destroy(it->second));
  daemon_.names_.erase(it);
  return Status::Ok();
}

Status Connection::DoInvoke(const fb::Invoke& req) {
  dx_runtime_t* rt = daemon_.executor_.runtime();
  std::string op = Str(req.op());
  dx_op_id_t id = 0;
  Status s = FromDx(dx_runtime_op_lookup(rt, op.c_str(), &id), "Invoke: op '" + op + "'");
  if (!s.ok()) return s;
  std::vector<dx_tensor_t*> ins, outs;
  auto resolve = [&](const flatbuffers::Vector<const fb::TensorHandle*>* v,
                     std::vector<dx_tensor_t*>& into, const char* what) -> Status {
    if (!v) return Status::Ok();
    for (uint32_t i = 0; i < v->size(); ++i) {
      uint64_t h = v->Get(i)->value();
      if (h == 0) {
        into.push_back(nullptr);
        continue;
      }
      Daemon::Slot* slot = nullptr;
      Status st = daemon_.Lookup(session_, h, &slot);
      if (!st.ok()) {
        st.message = "Invoke '" + op + "', " + what + " " + std::to_string(i) + ": " + st.message;
        return st;
      }
      into.push_back(slot->tensor);
    }
    return Status::Ok();
  };
  s = resolve(req.inputs(), ins, "input");
  if (!s.ok()) return s;
  s = resolve(req.outputs(), outs, "output");
  if (!s.ok()) return s;
  dx_invoke_options_t opt{};
  opt.struct_size = DX_INVOKE_OPTIONS_SIZE_1_0;
  if (req.backward()) opt.flags |= DX_INVOKE_FLAG_BACKWARD;
  std::string plugin = Str(req.plugin());
  if (!plugin.empty()) {
    const auto& plugins = daemon_.executor_.plugins();
    auto it = std::find_if(plugins.begin(), plugins.end(),
                           [&](const wire::PluginEntry& p) { return p.name == plugin; });
    if (it == plugins.end())
      return Status::Error(DX_NOT_FOUND, "Invoke '" + op + "': no plugin '" + plugin + "'");
    opt.flags |= DX_INVOKE_FLAG_PLUGIN;
    opt.plugin_index = int32_t(it - plugins.begin());
  }
  dx_attrs_t* attrs = nullptr;
  if (req.attrs() && req.attrs()->size() > 0) {
    s = FromDx(dx_attrs_create(&attrs), "dx_attrs_create");
    if (!s.ok()) return s;
    for (const fb::Attr* a : *req.attrs()) {
      std::string name = Str(a->name());
      dx_error_t* e = nullptr;
      switch (a->type()) {
        case fb::AttrType::INT: e = dx_attrs_set_i64(attrs, name.c_str(), a->i()); break;
        case fb::AttrType::FLOAT: e = dx_attrs_set_f64(attrs, name.c_str(), a->f()); break;
        case fb::AttrType::INTS: {
          std::vector<int64_t> v;
          if (a->ints()) v.assign(a->ints()->begin(), a->ints()->end());
          e = dx_attrs_set_i64_array(attrs, name.c_str(), v.data(), int64_t(v.size()));
          break;
        }
        case fb::AttrType::FLOATS: {
          std::vector<double> v;
          if (a->floats()) v.assign(a->floats()->begin(), a->floats()->end());
          e = dx_attrs_set_f64_array(attrs, name.c_str(), v.data(), int64_t(v.size()));
          break;
        }
        case fb::AttrType::STRING: {
          std::string v = Str(a->s());
          e = dx_attrs_set_string(attrs, name.c_str(), v.data(), int64_t(v.size()));
          break;
        }
        default:
          e = nullptr;
          s = Status::Error(DX_UNSUPPORTED, "Invoke '" + op + "': attribute '" + name +
                                                "' has an unknown type");
          break;
      }
      if (e) s = FromDx(e, "Invoke '" + op + "': attribute '" + name + "'");
      if (!s.ok()) {
        dx_error_destroy(dx_attrs_destroy(attrs));
        return s;
      }
    }
  }
  s = FromDx(dx_invoke_ex(rt, id, ins.data(), int32_t(ins.size()), outs.data(),
                          int32_t(outs.size()), attrs, &opt),
             "Invoke '" + op + "'");
  dx_error_destroy(dx_attrs_destroy(attrs));
  return s;
}

}  // namespace deepx::daemon
