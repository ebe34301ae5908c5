// deepx::daemon: the request handler of deepxd, without sockets. A Daemon owns the executor
// (today: the plugins loaded in this process through the host API, "in-process" mode), the
// table of tensor handles of every session and the shared tensor names. A Connection is one
// client's byte stream: bytes in (Feed), reply bytes out (TakeOutput). The libuv server
// (server.h), the tests and the fuzz target fuzz_daemon_handler all drive it the same way.
//
// Threading: a Daemon and its Connections are used from one thread (the event loop).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <deepx/host.h>
#include <deepx/wire/wire.h>

#include "deepx/daemon/config.h"
#include "deepx/daemon/log.h"
#include "deepx/daemon/metrics.h"

namespace deepx::daemon {

/// What runs the ops: the plugins of the configuration, loaded into this process through the
/// host API (dx_runtime_*). Isolated worker processes will implement the same role later.
class Executor {
 public:
  /// Creates a runtime and loads |plugins| (paths or installed names); DEEPX_PLUGIN_PATH and
  /// the other environment variables are ignored, so only the configuration decides. Logs of
  /// the runtime and its plugins go to |log|. On error returns null with |error| set.
  static std::unique_ptr<Executor> Create(const std::vector<std::string>& plugins,
                                          bool require_certified, Logger& log,
                                          wire::Status& error);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  /// The runtime; owned by the executor.
  dx_runtime_t* runtime() const { return runtime_; }
  /// Loads one more plugin into the running runtime (a SIGHUP reload that lists a new one) and
  /// reads the catalogue again; the devices, ops and plugins loaded before keep their indices.
  wire::Status LoadPlugin(const std::string& plugin);
  /// The catalogue, read at start and again after LoadPlugin.
  const std::vector<wire::PluginEntry>& plugins() const { return plugins_; }
  const std::vector<wire::DeviceEntry>& devices() const { return devices_; }
  const std::vector<std::string>& ops() const { return ops_; }
  const std::vector<wire::KernelEntry>& kernels() const { return kernels_; }

 private:
  Executor() = default;
  wire::Status ReadCatalogue();
  dx_runtime_t* runtime_ = nullptr;
  std::vector<wire::PluginEntry> plugins_;
  std::vector<wire::DeviceEntry> devices_;
  std::vector<std::string> ops_;
  std::vector<wire::KernelEntry> kernels_;
};

/// Counters of one session, as Stats reports them.
struct SessionStats {
  uint64_t tensors = 0;          ///< live handles
  uint64_t bytes_allocated = 0;  ///< bytes of the tensors it created (views, opens: 0)
  uint64_t tasks_completed = 0;  ///< requests answered OK
  uint64_t tasks_failed = 0;     ///< requests answered with an error
  uint64_t protocol_errors = 0;  ///< frames or messages refused by the wire layer
};

/// Daemon-wide counters.
struct DaemonStats {
  uint64_t sessions_opened = 0;
  uint64_t sessions_open = 0;
  uint64_t connections_refused = 0;  ///< by the uid allow-list or max_connections (server.cc)
  uint64_t tasks_completed = 0;
  uint64_t tasks_failed = 0;
  uint64_t protocol_errors = 0;
};

class Connection;

/// The state shared by every session: the executor, the handle table and the shared names.
class Daemon {
 public:
  /// |executor| and |log| must outlive the Daemon.
  Daemon(const Config& config, Executor& executor, Logger& log);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  /// A new connection with a new session. |peer| describes the client for the logs; |uid| is
  /// its user (a session is resumed only by a connection of the same uid).
  std::unique_ptr<Connection> Open(const std::string& peer, uint32_t uid = 0);
  /// Ends the sessions whose connection closed more than Config::resume_seconds ago (freeing
  /// their handles). Returns how many ended. The server calls it every second.
  size_t ExpireDetached();
  /// Sessions waiting for a resume (their connection closed, the grace period not over).
  size_t detached_sessions() const;

  const Config& config() const { return config_; }
  Logger& log() { return log_; }
  DaemonStats& stats() { return stats_; }
  /// The Prometheus metrics (metrics.h); safe to render from another thread.
  Metrics& metrics() { return metrics_; }
  /// Replaces what a configuration reload may change while clients stay connected: the
  /// quotas, the log level and server.resume_seconds (SIGHUP, docs/operations.md). Other keys
  /// are ignored here.
  void Reconfigure(const Config& config);
  /// Live tensor handles over all sessions plus shared names (for tests and the drain log).
  size_t live_tensors() const;
  /// Tensors shared under a name (TensorName), which outlive the session that named them.
  size_t shared_names() const { return names_.size(); }

 private:
  friend class Connection;
  // A session: its handles (in slots_, by owner id) and counters outlive a connection that
  // closes when Config::resume_seconds > 0, until a Hello with its token resumes it or the grace
  // period ends.
  struct SessionState {
    uint64_t id = 0;
    uint32_t uid = 0;
    uint64_t token = 0;  // 0: not resumable (no Hello yet, or resume_seconds is 0)
    SessionStats stats;
    bool detached = false;
    std::chrono::steady_clock::time_point expires{};
  };
  // Frees the session's handles and forgets it.
  void EndSession(uint64_t id, const char* why);
  // One entry of the handle table. A handle is MakeHandle(index, generation); a slot's
  // generation changes when it is freed, so old handles of it are stale.
  struct Slot {
    uint32_t generation = 1;
    uint64_t owner = 0;  // session id; 0: free
    dx_tensor_t* tensor = nullptr;
    uint64_t bytes = 0;  // bytes charged to the owner's quota
    int32_t device = -1;  // the tensor's device index (for the memory metrics), -1: unknown
  };
  uint64_t AddSlot(uint64_t owner, dx_tensor_t* tensor, uint64_t bytes);
  // Finds |handle| for session |owner|: DX_INVALID_ARGUMENT (0), DX_NOT_FOUND (unknown or
  // stale), DX_PERMISSION_DENIED (another session's).
  wire::Status Lookup(uint64_t owner, uint64_t handle, Slot** out);
  void FreeSlot(uint32_t index);

  Config config_;
  Executor& executor_;
  Logger& log_;
  DaemonStats stats_;
  Metrics metrics_;
  uint64_t next_session_ = 1;
  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::map<std::string, dx_tensor_t*> names_;  // shared names: a view owned by the daemon
  std::map<uint64_t, std::unique_ptr<SessionState>> sessions_;
};

/// One client connection and its session: decodes the stream with deepx::wire, queues the
/// verified requests, runs them in order and writes the replies.
class Connection {
 public:
  ~Connection();  // ends the session (frees its tensors), or detaches it for a resume
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  /// Feeds bytes from the client: decodes them, answers protocol errors, queues requests (a
  /// Cancel acts on the queue at once), then runs the queue. Replies accumulate in output().
  void Feed(std::span<const uint8_t> data);
  /// The client closed its side: logs a stream cut short.
  void Finish();
  /// Bytes received in place: while a TensorWrite's bulk frame is being read, the spot its
  /// next bytes belong in (empty otherwise: read into a buffer of your own and Feed it).
  /// After receiving n bytes there, CommitBulk(n) does what Feed of them would.
  std::span<uint8_t> BulkWindow();
  void CommitBulk(size_t n);
  /// A piece of the reply bytes, kept alive by |keep| until it is written (a TensorRead's
  /// bulk is sent from the buffer the tensor was read into, never copied again).
  struct OutPiece {
    std::shared_ptr<const void> keep;
    const uint8_t* data = nullptr;
    size_t size = 0;
  };
  /// Takes the reply bytes produced so far, in order, as pieces to write together.
  std::vector<OutPiece> TakeOutputPieces();
  /// Takes the reply bytes produced so far, as one buffer (a copy of the pieces).
  std::vector<uint8_t> TakeOutput();
  /// True once a fatal error was answered: write the output, then close the connection.
  bool closing() const { return closing_; }
  uint64_t session_id() const { return session_; }
  const SessionStats& stats() const { return state_->stats; }

 private:
  friend class Daemon;
  Connection(Daemon& daemon, Daemon::SessionState* state, std::string peer);

  struct Queued {
    wire::Message message;
    bool cancelled = false;
  };
  void Enqueue(wire::Message&& message);
  void RunQueue();
  void Execute(const wire::Message& message);
  void Reply(std::span<const uint8_t> header, std::span<const uint8_t> bulk = {});
  // A reply whose bulk is sent from |bulk| in place (|keep| owns it) in bulk frames.
  void ReplyShared(std::span<const uint8_t> header, std::shared_ptr<const void> keep,
                   std::span<const uint8_t> bulk);
  void OnEvents(std::vector<wire::Event>& events);
  void PushOut();  // moves out_ into pieces_
  void ReplyError(uint64_t task, const wire::Status& status);
  void ReplyOk(const std::vector<uint8_t>& header);
  // Counts a reply of status |code| to the current request (cur_*) in the stats and metrics.
  void Count(dx_status_t code);
  // Sets the current request: its type, op (Invoke) and start time, for Count.
  void Begin(const wire::Message& message);

  // The request handlers; each returns the reply header (and bulk, for TensorRead).
  wire::Status DoHello(uint64_t task, const wire::fb::Hello& req, std::vector<uint8_t>& reply);
  wire::Status DoListKernels(uint64_t task, const wire::fb::ListKernels& req,
                             std::vector<uint8_t>& reply);
  wire::Status DoTensorCreate(uint64_t task, const wire::fb::TensorCreate& req,
                              std::vector<uint8_t>& reply);
  wire::Status DoTensorFree(const wire::fb::TensorFree& req);
  wire::Status DoTensorWrite(const wire::fb::TensorWrite& req, std::span<const uint8_t> bulk);
  wire::Status DoTensorRead(const wire::fb::TensorRead& req, std::shared_ptr<const void>& keep,
                            std::span<const uint8_t>& bulk);
  wire::Status DoTensorCopy(const wire::fb::TensorCopy& req);
  wire::Status DoTensorView(uint64_t task, const wire::fb::TensorView& req,
                            std::vector<uint8_t>& reply);
  wire::Status DoTensorName(const wire::fb::TensorName& req);
  wire::Status DoTensorOpen(uint64_t task, const wire::fb::TensorOpen& req,
                            std::vector<uint8_t>& reply);
  wire::Status DoTensorUnname(const wire::fb::TensorUnname& req);
  wire::Status DoInvoke(const wire::fb::Invoke& req);
  wire::Status DoCancel(const wire::fb::Cancel& req);
  // A new handle of this session for |tensor| (ownership passes), within the quotas.
  wire::Status AddTensor(dx_tensor_t* tensor, uint64_t bytes, uint64_t* out_handle);
  wire::Status Describe(uint64_t task, uint64_t handle, dx_tensor_t* tensor,
                        std::vector<uint8_t>& reply);

  Daemon& daemon_;
  Daemon::SessionState* state_;  // owned by daemon_.sessions_
  uint64_t session_;             // state_->id
  bool said_hello_ = false;
  std::string peer_;
  wire::StreamDecoder decoder_;
  std::deque<Queued> queue_;
  bool running_ = false;
  std::vector<uint8_t> out_;       // reply bytes after the last of pieces_
  std::vector<OutPiece> pieces_;  // reply bytes before out_
  bool closing_ = false;
  const char* cur_request_ = "";
  uint64_t cur_task_ = 0;  // the client's task id of the current request, for the logs
  std::string cur_op_;
  std::chrono::steady_clock::time_point cur_start_{};
};

}  // namespace deepx::daemon
