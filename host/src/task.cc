// Tasks and programs: dx_invoke_async, dx_task_*, dx_program_* (task.h).
#include "task.h"

#include <algorithm>
#include <chrono>

#include "remote.h"

namespace deepx::host {

// Defined in dispatch.cc: the body of dx_invoke / dx_invoke_ex.
dx_status_t Invoke(const dx_runtime_t* runtime, dx_op_id_t id, dx_tensor_t* const* inputs,
                   int32_t num_inputs, dx_tensor_t* const* outputs, int32_t num_outputs,
                   const dx_attrs_t* attrs, const dx_invoke_options_t* options);

namespace {

constexpr size_t kMaxProgramSteps = 4096;

// Runs one task's work on the executor thread; returns its outcome (message parked).
dx_status_t RunWork(const Work& work, TaskState& state) {
  if (work.program) {
    Runtime* rt = nullptr;
    if (dx_status_t st = Resolve(work.runtime, "dx_program_submit", "the program's runtime", &rt)) {
      return st;
    }
    if (rt->remote) {
      int32_t completed = 0;
      const dx_status_t st = rt->remote->Submit(work.steps, &completed, "dx_program_submit");
      std::lock_guard<std::mutex> lock(state.mutex);
      state.steps_completed = completed;
      return st;
    }
  }
  for (size_t i = 0; i < work.steps.size(); ++i) {
    const InvokeStep& s = work.steps[i];
    ClearPendingMessage();
    const dx_status_t st =
        Invoke(work.runtime, s.op, s.inputs.data(), static_cast<int32_t>(s.inputs.size()),
               s.outputs.data(), static_cast<int32_t>(s.outputs.size()), s.attrs,
               s.has_options ? &s.options : nullptr);
    if (st != DX_OK) {
      if (!work.program) return st;
      return Failf(st, "dx_program_submit: step %zu (%s) failed after %zu steps completed: %s", i,
                   s.op_name.c_str(), i, PendingMessage().c_str());
    }
    std::lock_guard<std::mutex> lock(state.mutex);
    ++state.steps_completed;
  }
  return DX_OK;
}

// Checks and copies one invoke's arguments into `step` (the op named by the runtime's catalogue).
dx_status_t MakeStep(dx_runtime_t* runtime, dx_op_id_t op, dx_tensor_t* const* inputs,
                     int32_t num_inputs, dx_tensor_t* const* outputs, int32_t num_outputs,
                     const dx_attrs_t* attrs, const dx_invoke_options_t* options,
                     InvokeStep* step, const char* where) {
  Runtime* rt = nullptr;
  if (dx_status_t st = Resolve(runtime, where, "runtime", &rt)) return st;
  if (num_inputs < 0 || num_outputs < 0 || num_inputs > 64 || num_outputs > 64 ||
      (num_inputs > 0 && inputs == nullptr) || (num_outputs > 0 && outputs == nullptr)) {
    return Failf(DX_INVALID_ARGUMENT,
                 "%s: bad input/output arrays (%d inputs, %d outputs; 0 to 64 each, non-null "
                 "when not empty)",
                 where, num_inputs, num_outputs);
  }
  if (options != nullptr) {
    if (options->struct_size < DX_STRUCT_SIZE(dx_invoke_options_t, flags)) {
      return Failf(DX_INVALID_ARGUMENT,
                   "%s: options->struct_size is %zu, too small; set it to "
                   "DX_INVOKE_OPTIONS_SIZE_1_0",
                   where, options->struct_size);
    }
    std::memset(&step->options, 0, sizeof step->options);
    std::memcpy(&step->options, options,
                std::min<size_t>(options->struct_size, DX_INVOKE_OPTIONS_SIZE_1_0));
    step->options.struct_size = DX_INVOKE_OPTIONS_SIZE_1_0;
    step->options.next = nullptr;  // borrowed for the call only: not kept
    step->has_options = true;
  }
  if (rt->remote) {
    if (op >= rt->remote->ops().size()) {
      return Failf(DX_NOT_FOUND, "%s: op id %u is not interned in this runtime", where, op);
    }
    step->op_name = rt->remote->ops()[op].name;
  } else {
    std::shared_lock<RegistryLock> registry(rt->core->registry);
    if (op >= rt->core->ops.size()) {
      return Failf(DX_NOT_FOUND, "%s: op id %u is not interned in this runtime", where, op);
    }
    step->op_name = rt->core->ops[op].name;
  }
  step->op = op;
  step->inputs.assign(inputs, inputs + num_inputs);
  step->outputs.assign(outputs, outputs + num_outputs);
  step->attrs = attrs;
  return DX_OK;
}

// The runtime's executor, started on first use.
std::shared_ptr<Executor> ExecutorOf(Runtime& rt) {
  std::lock_guard<std::mutex> lock(rt.executor_mutex);
  if (!rt.executor) rt.executor = std::make_shared<Executor>();
  return rt.executor;
}

// Queues `work` on its runtime's executor and issues the task handle.
dx_status_t Start(Work work, dx_task_t** out_task, const char* where) {
  Runtime* rt = nullptr;
  if (dx_status_t st = Resolve(work.runtime, where, "runtime", &rt)) return st;
  auto state = std::make_shared<TaskState>();
  work.state = state;
  auto task = std::make_unique<Task>();
  task->state = state;
  dx_task_t* handle = nullptr;
  if (dx_status_t st = Issue(std::move(task), &handle, where)) return st;
  if (dx_status_t st = ExecutorOf(*rt)->Enqueue(std::move(work), where)) {
    (void)Retire<Task>(handle, where, "task");
    return st;
  }
  *out_task = handle;
  return DX_OK;
}

}  // namespace

Task::~Task() {
  if (!state) return;
  std::lock_guard<std::mutex> lock(state->mutex);
  if (state->phase == TaskState::Phase::kQueued) {
    state->FinishLocked(DX_CANCELLED, "the task was destroyed before it ran");
  }
}

dx_status_t Executor::Enqueue(Work work, const char* where) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopping_) {
    return Failf(DX_FAILED_PRECONDITION, "%s: the runtime is being destroyed", where);
  }
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  queue_.push_back(std::move(work));
  wake_.notify_one();
  return DX_OK;
}

void Executor::Shutdown() {
  std::deque<Work> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
    dropped.swap(queue_);
    wake_.notify_all();
  }
  for (Work& w : dropped) {
    std::lock_guard<std::mutex> lock(w.state->mutex);
    if (w.state->phase == TaskState::Phase::kQueued) {
      w.state->FinishLocked(DX_CANCELLED, "the runtime was destroyed before the task ran");
    }
  }
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void Executor::Loop() {
  for (;;) {
    Work work;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    {
      std::lock_guard<std::mutex> lock(work.state->mutex);
      if (work.state->phase != TaskState::Phase::kQueued) continue;  // cancelled
      work.state->phase = TaskState::Phase::kRunning;
    }
    ClearPendingMessage();
    dx_status_t code;
    try {
      code = RunWork(work, *work.state);
    } catch (const std::bad_alloc&) {
      code = Fail(DX_OUT_OF_MEMORY, "out of memory");
    } catch (const std::exception& e) {
      code = Fail(DX_INTERNAL, std::string("internal error: ") + e.what());
    } catch (...) {
      code = Fail(DX_INTERNAL, "internal error: unknown exception");
    }
    std::string message = code == DX_OK ? std::string() : PendingMessage();
    ClearPendingMessage();
    std::lock_guard<std::mutex> lock(work.state->mutex);
    work.state->FinishLocked(code, std::move(message));
  }
}

void Runtime::StopExecutor() {
  std::shared_ptr<Executor> e;
  {
    std::lock_guard<std::mutex> lock(executor_mutex);
    e = executor;
  }
  if (e) e->Shutdown();
}

Runtime::~Runtime() { StopExecutor(); }

}  // namespace deepx::host

using namespace deepx::host;

DX_EXPORT dx_error_t* dx_invoke_async(dx_runtime_t* runtime, dx_op_id_t op,
                                      dx_tensor_t* const* inputs, int32_t num_inputs,
                                      dx_tensor_t* const* outputs, int32_t num_outputs,
                                      const dx_attrs_t* attrs, const dx_invoke_options_t* options,
                                      dx_task_t** out_task) {
  return Guard([&]() -> dx_status_t {
    if (out_task == nullptr) return Fail(DX_INVALID_ARGUMENT, "dx_invoke_async: out_task is null");
    *out_task = nullptr;
    Work work;
    work.runtime = runtime;
    work.steps.emplace_back();
    if (dx_status_t st = MakeStep(runtime, op, inputs, num_inputs, outputs, num_outputs, attrs,
                                  options, &work.steps.back(), "dx_invoke_async")) {
      return st;
    }
    return Start(std::move(work), out_task, "dx_invoke_async");
  });
}

DX_EXPORT dx_error_t* dx_task_wait(dx_task_t* task, int32_t timeout_ms) {
  return Guard([&]() -> dx_status_t {
    Task* t = nullptr;
    if (dx_status_t st = Resolve(task, "dx_task_wait", "task", &t)) return st;
    if (timeout_ms < -1) {
      return Failf(DX_INVALID_ARGUMENT,
                   "dx_task_wait: timeout_ms is %d; use 0 to look, a positive count of "
                   "milliseconds, or -1 to wait until the task is done",
                   timeout_ms);
    }
    TaskState& s = *t->state;
    std::unique_lock<std::mutex> lock(s.mutex);
    auto is_done = [&s] { return s.phase == TaskState::Phase::kDone; };
    if (timeout_ms < 0) {
      s.done.wait(lock, is_done);
    } else if (!s.done.wait_for(lock, std::chrono::milliseconds(timeout_ms), is_done)) {
      return Failf(DX_TIMEOUT, "dx_task_wait: the task is not done after %d ms (it goes on: "
                   "wait again, or cancel it if it has not started)", timeout_ms);
    }
    if (s.code == DX_OK) return DX_OK;
    return Fail(s.code, s.message);
  });
}

DX_EXPORT dx_error_t* dx_task_poll(dx_task_t* task, int32_t* out_done) {
  return Guard([&]() -> dx_status_t {
    Task* t = nullptr;
    if (dx_status_t st = Resolve(task, "dx_task_poll", "task", &t)) return st;
    if (out_done == nullptr) return Fail(DX_INVALID_ARGUMENT, "dx_task_poll: out_done is null");
    std::lock_guard<std::mutex> lock(t->state->mutex);
    *out_done = t->state->phase == TaskState::Phase::kDone ? 1 : 0;
    return DX_OK;
  });
}

DX_EXPORT dx_error_t* dx_task_cancel(dx_task_t* task) {
  return Guard([&]() -> dx_status_t {
    Task* t = nullptr;
    if (dx_status_t st = Resolve(task, "dx_task_cancel", "task", &t)) return st;
    TaskState& s = *t->state;
    std::lock_guard<std::mutex> lock(s.mutex);
    switch (s.phase) {
      case TaskState::Phase::kQueued:
        s.FinishLocked(DX_CANCELLED, "the task was cancelled before it ran");
        return DX_OK;
      case TaskState::Phase::kRunning:
        return Fail(DX_FAILED_PRECONDITION,
                    "dx_task_cancel: the task is running and cannot be interrupted; it ends "
                    "with its own outcome");
      case TaskState::Phase::kDone:
        if (s.code == DX_CANCELLED) return DX_OK;
        return Fail(DX_FAILED_PRECONDITION,
                    "dx_task_cancel: the task is done already; nothing to cancel");
    }
    return DX_OK;
  });
}

DX_EXPORT dx_error_t* dx_task_steps_completed(dx_task_t* task, int32_t* out_steps) {
  return Guard([&]() -> dx_status_t {
    Task* t = nullptr;
    if (dx_status_t st = Resolve(task, "dx_task_steps_completed", "task", &t)) return st;
    if (out_steps == nullptr) {
      return Fail(DX_INVALID_ARGUMENT, "dx_task_steps_completed: out_steps is null");
    }
    std::lock_guard<std::mutex> lock(t->state->mutex);
    *out_steps = t->state->steps_completed;
    return DX_OK;
  });
}

DX_EXPORT dx_error_t* dx_task_destroy(dx_task_t* task) {
  return Guard([&]() -> dx_status_t { return Retire<Task>(task, "dx_task_destroy", "task"); });
}

DX_EXPORT dx_error_t* dx_program_create(dx_runtime_t* runtime, dx_program_t** out_program) {
  return Guard([&]() -> dx_status_t {
    if (out_program == nullptr) {
      return Fail(DX_INVALID_ARGUMENT, "dx_program_create: out_program is null");
    }
    *out_program = nullptr;
    Runtime* rt = nullptr;
    if (dx_status_t st = Resolve(runtime, "dx_program_create", "runtime", &rt)) return st;
    auto program = std::make_unique<Program>();
    program->runtime = runtime;
    return Issue(std::move(program), out_program, "dx_program_create");
  });
}

DX_EXPORT dx_error_t* dx_program_add_invoke(dx_program_t* program, dx_op_id_t op,
                                            dx_tensor_t* const* inputs, int32_t num_inputs,
                                            dx_tensor_t* const* outputs, int32_t num_outputs,
                                            const dx_attrs_t* attrs,
                                            const dx_invoke_options_t* options) {
  return Guard([&]() -> dx_status_t {
    Program* p = nullptr;
    if (dx_status_t st = Resolve(program, "dx_program_add_invoke", "program", &p)) return st;
    if (p->steps.size() >= kMaxProgramSteps) {
      return Failf(DX_RESOURCE_EXHAUSTED, "dx_program_add_invoke: the program has %zu steps, the "
                   "most one program may have", kMaxProgramSteps);
    }
    InvokeStep step;
    if (dx_status_t st = MakeStep(p->runtime, op, inputs, num_inputs, outputs, num_outputs, attrs,
                                  options, &step, "dx_program_add_invoke")) {
      return st;
    }
    p->steps.push_back(std::move(step));
    return DX_OK;
  });
}

DX_EXPORT dx_error_t* dx_program_submit(dx_program_t* program, dx_task_t** out_task) {
  return Guard([&]() -> dx_status_t {
    if (out_task == nullptr) return Fail(DX_INVALID_ARGUMENT, "dx_program_submit: out_task is null");
    *out_task = nullptr;
    Program* p = nullptr;
    if (dx_status_t st = Resolve(program, "dx_program_submit", "program", &p)) return st;
    if (p->steps.empty()) {
      return Fail(DX_INVALID_ARGUMENT,
                  "dx_program_submit: the program is empty; add steps with dx_program_add_invoke()");
    }
    Work work;
    work.runtime = p->runtime;
    work.steps = p->steps;
    work.program = true;
    return Start(std::move(work), out_task, "dx_program_submit");
  });
}

DX_EXPORT dx_error_t* dx_program_destroy(dx_program_t* program) {
  return Guard(
      [&]() -> dx_status_t { return Retire<Program>(program, "dx_program_destroy", "program"); });
}
