// Tasks and programs (dx_invoke_async, dx_program_*, dx_task_*; task.cc): each runtime, in-process
// or remote, runs its tasks on one executor thread of its own, in submission order. A task runs
// the same bodies as the synchronous calls (Invoke of dispatch.cc, which hands a remote runtime's
// call to remote.cc; RemoteConnection::Submit for a remote program), so its outcome is what the
// synchronous call would have returned.
#ifndef DEEPX_HOST_SRC_TASK_H_
#define DEEPX_HOST_SRC_TASK_H_

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "internal.h"

namespace deepx::host {

// A task's state, shared by its handle (Task) and the executor that runs it.
struct TaskState {
  enum class Phase { kQueued, kRunning, kDone };
  std::mutex mutex;
  std::condition_variable done;
  Phase phase = Phase::kQueued;
  dx_status_t code = DX_OK;
  std::string message;
  int32_t steps_completed = 0;
  // Ends the task with `code` (under `mutex`, held by the caller) and wakes its waiters.
  void FinishLocked(dx_status_t c, std::string m) {
    phase = Phase::kDone;
    code = c;
    message = std::move(m);
    done.notify_all();
  }
};

// What a task handle names. Destroying it cancels the task if it has not started.
struct Task {
  std::shared_ptr<TaskState> state;
  ~Task();
};

// What a program handle names.
struct Program {
  dx_runtime_t* runtime = nullptr;
  std::vector<InvokeStep> steps;
};

// One task's work: one step (an invoke) or a program's steps.
struct Work {
  std::shared_ptr<TaskState> state;
  dx_runtime_t* runtime = nullptr;
  std::vector<InvokeStep> steps;
  bool program = false;
};

class Executor {
 public:
  Executor() = default;
  ~Executor() { Shutdown(); }
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;
  // Queues `work` (starts the thread on first use); refused after Shutdown.
  dx_status_t Enqueue(Work work, const char* where);
  // Cancels what is queued, waits for the running task, stops the thread. Idempotent.
  void Shutdown();

 private:
  void Loop();
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Work> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace deepx::host

#endif  // DEEPX_HOST_SRC_TASK_H_
