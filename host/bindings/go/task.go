package deepx

// #include "deepxgo.h"
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"
)

// waitSliceMs is how long one dx_task_wait() call of InvokeContext and Program.Submit blocks
// before the goroutine looks at its context again: cancellation is seen within about this long,
// and no cgo call waits on a task for more than this.
const waitSliceMs = 10

// borrow is what a queued or running task holds: one guard acquisition per tensor reference
// (Close of a tensor waits for the task) and a shared lock on each distinct attribute list
// (setters and Close wait; host.h wants the list unchanged until the task is done).
type borrow struct {
	tensors []*Tensor
	attrs   []*Attrs
}

// take acquires every tensor and attribute list of one call; on failure nothing stays held.
func (b *borrow) take(call, role string, ts []*Tensor) error {
	for i, t := range ts {
		if t == nil {
			continue
		}
		if !t.g.acquire() {
			return closedError(call, fmt.Sprintf("%s tensor %d", role, i))
		}
		b.tensors = append(b.tensors, t)
	}
	return nil
}

func (b *borrow) takeAttrs(call string, a *Attrs) error {
	if a == nil {
		return nil
	}
	for _, held := range b.attrs {
		if held == a { // RWMutex read locks must not nest
			return nil
		}
	}
	a.mu.RLock()
	if a.closed {
		a.mu.RUnlock()
		return closedError(call, "attribute list")
	}
	b.attrs = append(b.attrs, a)
	return nil
}

// release drops everything held, once the task is done (or was never made).
func (b *borrow) release() {
	for _, a := range b.attrs {
		a.mu.RUnlock()
	}
	for _, t := range b.tensors {
		t.g.release()
	}
	b.attrs, b.tensors = nil, nil
}

// handleArray copies the handles of ts into C memory (the host copies the array during the
// call; no Go memory is passed to C). Free it with C.free; nil for an empty list.
func handleArray(ts []*Tensor) *C.uintptr_t {
	if len(ts) == 0 {
		return nil
	}
	p := (*C.uintptr_t)(C.calloc(C.size_t(len(ts)), C.size_t(unsafe.Sizeof(C.uintptr_t(0)))))
	a := unsafe.Slice(p, len(ts))
	for i, t := range ts {
		a[i] = handleBits(handleOf(t))
	}
	return p
}

// InvokeContext runs op as Invoke does, but through the runtime's task queue
// (dx_invoke_async()), so that ctx can stop it: it returns when the invoke is done or when ctx
// is done, whichever comes first.
//
//   - ctx already done: nothing is submitted and the outputs are untouched.
//   - ctx done while the invoke waits behind other tasks of the runtime: the task is cancelled
//     (dx_task_cancel(); it never runs, the outputs are untouched).
//   - ctx done while the invoke runs: a running kernel or daemon request cannot be interrupted;
//     InvokeContext returns at once and the task finishes in the background. Until it does,
//     the tensors stay borrowed: their Close, and the setters and Close of attrs, wait for it.
//
// In the three cases the error is an *Error that satisfies errors.Is(err, ctx.Err())
// (context.Canceled or context.DeadlineExceeded) and carries a deepx status: StatusCancelled
// for a cancelled context, StatusTimeout for a deadline; its message says whether the invoke
// ran. Otherwise the errors are Invoke's.
//
// The tasks of one runtime run one at a time in submission order, and synchronous calls
// (Invoke, Tensor.Read, ...) do not wait for them; InvokeContext returns only once its task is
// done (or abandoned to ctx), so its outputs are ready to read when it returns nil. Invoke
// stays the cheaper call where no context is needed.
func (r *Runtime) InvokeContext(ctx context.Context, op Op, inputs, outputs []*Tensor, attrs *Attrs) error {
	const call = "Runtime.InvokeContext"
	if err := ctx.Err(); err != nil {
		return contextError(call, err, "the invoke was not submitted")
	}
	if len(inputs) > maxTensors || len(outputs) > maxTensors {
		return newError(StatusOutOfRange, call, "%d inputs and %d outputs (at most %d each)",
			len(inputs), len(outputs), maxTensors)
	}
	b := &borrow{}
	if err := b.take(call, "input", inputs); err != nil {
		b.release()
		return err
	}
	if err := b.take(call, "output", outputs); err != nil {
		b.release()
		return err
	}
	if err := b.takeAttrs(call, attrs); err != nil {
		b.release()
		return err
	}
	var ah *C.dx_attrs_t
	if attrs != nil {
		ah = attrs.h
	}
	if !r.g.acquire() {
		b.release()
		return closedError(call, "runtime")
	}
	in, out := handleArray(inputs), handleArray(outputs)
	var task *C.dx_task_t
	e := C.deepxgo_invoke_async(handleBits(r.h), C.dx_op_id_t(op.ID), in, C.int32_t(len(inputs)),
		out, C.int32_t(len(outputs)), handleBits(ah), &task)
	C.free(unsafe.Pointer(in))
	C.free(unsafe.Pointer(out))
	r.g.release()
	if err := takeError(call, e); err != nil {
		b.release()
		return err
	}
	return awaitTask(ctx, call, task, b, nil)
}

// awaitTask waits for task in slices, watching ctx; it destroys the task and releases b once
// the task is done, in the background when ctx ends the wait first. onDone, if set, turns the
// task's outcome into the error returned (Program: which step failed).
func awaitTask(ctx context.Context, call string, task *C.dx_task_t, b *borrow,
	onDone func(task *C.dx_task_t, outcome error) error) error {
	var done C.int32_t
	ctxDone := ctx.Done()
	for {
		e := C.deepxgo_task_wait(handleBits(task), waitSliceMs, &done)
		if done != 0 {
			return finishTask(call, task, b, e, onDone)
		}
		select {
		case <-ctxDone:
			return abandonTask(ctx, call, task, b, onDone)
		default:
		}
	}
}

func finishTask(call string, task *C.dx_task_t, b *borrow, e *C.dx_error_t,
	onDone func(*C.dx_task_t, error) error) error {
	err := takeError(call, e)
	if onDone != nil {
		err = onDone(task, err)
	}
	C.dx_error_destroy(C.dx_task_destroy(task))
	b.release()
	return err
}

// abandonTask is awaitTask's way out when ctx is done first: cancel a queued task (it never
// runs), else leave the running one to a goroutine that waits for it, then destroys it and
// releases its tensors.
func abandonTask(ctx context.Context, call string, task *C.dx_task_t, b *borrow,
	onDone func(*C.dx_task_t, error) error) error {
	var done C.int32_t
	if ce := C.dx_task_cancel(task); ce == nil {
		// Cancelled before it started: its outcome is DX_CANCELLED, and it is done.
		e := C.deepxgo_task_wait(handleBits(task), 0, &done)
		outcome := takeError(call, e)
		C.dx_error_destroy(C.dx_task_destroy(task))
		b.release()
		msg := "the task was cancelled before it started; it never runs"
		var de *Error
		if errors.As(outcome, &de) {
			msg += " (" + de.Message + ")"
		}
		return contextError(call, ctx.Err(), msg)
	} else {
		C.dx_error_destroy(ce)
	}
	// Running, or done in the meantime: a done task gives its own outcome.
	if e := C.deepxgo_task_wait(handleBits(task), 0, &done); done != 0 {
		return finishTask(call, task, b, e, onDone)
	}
	go func() {
		var done C.int32_t
		for {
			e := C.deepxgo_task_wait(handleBits(task), 100, &done)
			if done != 0 {
				C.dx_error_destroy(e)
				C.dx_error_destroy(C.dx_task_destroy(task))
				b.release()
				return
			}
		}
	}()
	return contextError(call, ctx.Err(), "the task was running and could not be interrupted; "+
		"it finishes in the background and its tensors stay borrowed until then")
}

// contextError is the error of a call that ctx ended: errors.Is(err, cause) holds, and the
// status is StatusTimeout for a deadline, StatusCancelled otherwise.
func contextError(call string, cause error, message string) error {
	status := StatusCancelled
	if errors.Is(cause, context.DeadlineExceeded) {
		status = StatusTimeout
	}
	return &Error{Status: status, Call: call, Message: cause.Error() + ": " + message, cause: cause}
}

// Program is a list of invokes built once and run as one task of its runtime
// (dx_program_create()): in-process the runtime's executor runs the steps in order; on a
// remote runtime the whole program is one request to the daemon with one reply. A step's
// outputs may be a later step's inputs.
//
// A program refers to its tensors and attribute lists: they must stay open while it is used
// (Submit fails with StatusFailedPrecondition, before running anything, when one was closed),
// and during a Submit they are borrowed as by InvokeContext. Methods may be called from many
// goroutines; Add and the start of Submit are serialised.
type Program struct {
	r      *Runtime
	h      *C.dx_program_t
	mu     sync.Mutex
	closed bool
	steps  []programStep
}

type programStep struct {
	op              Op
	inputs, outputs []*Tensor
	attrs           *Attrs
}

// NewProgram creates an empty program for the runtime (dx_program_create()).
func (r *Runtime) NewProgram() (*Program, error) {
	const call = "Runtime.NewProgram"
	if err := r.enter(call); err != nil {
		return nil, err
	}
	defer r.leave()
	var h *C.dx_program_t
	if err := takeError(call, C.dx_program_create(r.h, &h)); err != nil {
		return nil, err
	}
	p := &Program{r: r, h: h}
	liveHandles.Add(1)
	runtime.SetFinalizer(p, (*Program).finalize)
	return p, nil
}

// Add appends one invoke (a step) to the program (dx_program_add_invoke()); the arguments are
// Invoke's. At most 4096 steps (StatusResourceExhausted past that).
func (p *Program) Add(op Op, inputs, outputs []*Tensor, attrs *Attrs) error {
	const call = "Program.Add"
	if len(inputs) > maxTensors || len(outputs) > maxTensors {
		return newError(StatusOutOfRange, call, "%d inputs and %d outputs (at most %d each)",
			len(inputs), len(outputs), maxTensors)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return closedError(call, "program")
	}
	b := &borrow{}
	defer b.release()
	if err := b.take(call, "input", inputs); err != nil {
		return err
	}
	if err := b.take(call, "output", outputs); err != nil {
		return err
	}
	if err := b.takeAttrs(call, attrs); err != nil {
		return err
	}
	var ah *C.dx_attrs_t
	if attrs != nil {
		ah = attrs.h
	}
	in, out := handleArray(inputs), handleArray(outputs)
	defer C.free(unsafe.Pointer(in))
	defer C.free(unsafe.Pointer(out))
	if err := takeError(call, C.deepxgo_program_add(handleBits(p.h), C.dx_op_id_t(op.ID), in,
		C.int32_t(len(inputs)), out, C.int32_t(len(outputs)), handleBits(ah))); err != nil {
		return err
	}
	p.steps = append(p.steps, programStep{op: op, inputs: append([]*Tensor(nil), inputs...),
		outputs: append([]*Tensor(nil), outputs...), attrs: attrs})
	return nil
}

// Len is the number of steps added.
func (p *Program) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.steps)
}

// StepError is Program.Submit's error when a step failed: the steps before it completed, the
// ones after it did not run. errors.Is and errors.As see the step's *Error through it.
type StepError struct {
	Step int // the failing step, from 0; also how many steps completed
	Op   Op  // its op
	Err  error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("deepx: Program.Submit: step %d (%s) failed: %v", e.Step, e.Op.Name, e.Err)
}

// Unwrap gives the step's *Error.
func (e *StepError) Unwrap() error { return e.Err }

// Submit runs the program's steps in order as one task (dx_program_submit()) and waits for
// it, as InvokeContext waits for an invoke: ctx cancels the task while it is queued, and a
// running program finishes in the background (its steps are not interrupted between kernels)
// with its tensors borrowed until then. A step that fails stops the program: the error is a
// *StepError naming it. An empty program is refused with StatusInvalidArgument. The program
// may be submitted again, and changed, once Submit returned.
func (p *Program) Submit(ctx context.Context) error {
	const call = "Program.Submit"
	if err := ctx.Err(); err != nil {
		return contextError(call, err, "the program was not submitted")
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return closedError(call, "program")
	}
	b := &borrow{}
	for i, s := range p.steps {
		role := fmt.Sprintf("step %d input", i)
		if err := b.take(call, role, s.inputs); err != nil {
			p.mu.Unlock()
			b.release()
			return err
		}
		if err := b.take(call, fmt.Sprintf("step %d output", i), s.outputs); err != nil {
			p.mu.Unlock()
			b.release()
			return err
		}
		if err := b.takeAttrs(call, s.attrs); err != nil {
			p.mu.Unlock()
			b.release()
			return err
		}
	}
	steps := p.steps
	if !p.r.g.acquire() {
		p.mu.Unlock()
		b.release()
		return closedError(call, "runtime")
	}
	var task *C.dx_task_t
	e := C.dx_program_submit(p.h, &task)
	p.r.g.release()
	p.mu.Unlock()
	if err := takeError(call, e); err != nil {
		b.release()
		return err
	}
	return awaitTask(ctx, call, task, b, func(task *C.dx_task_t, outcome error) error {
		if outcome == nil {
			return nil
		}
		var n C.int32_t
		if se := C.dx_task_steps_completed(task, &n); se != nil {
			C.dx_error_destroy(se)
			return outcome
		}
		if int(n) >= len(steps) {
			return outcome
		}
		return &StepError{Step: int(n), Op: steps[n].op, Err: outcome}
	})
}

// Close destroys the program (dx_program_destroy()); tasks already submitted are unaffected.
// Closing twice is a no-op.
func (p *Program) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.steps = nil
	runtime.SetFinalizer(p, nil)
	liveHandles.Add(-1)
	return takeError("Program.Close", C.dx_program_destroy(p.h))
}

func (p *Program) finalize() {
	if !p.closed {
		p.closed = true
		liveHandles.Add(-1)
		reportLeak("deepx: a Program was never closed; the garbage collector released it")
		C.dx_error_destroy(C.dx_program_destroy(p.h))
	}
}
