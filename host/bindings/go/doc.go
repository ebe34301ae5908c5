// Package deepx is the Go binding of deepx's host API (deepx/host.h): runtimes, plugins,
// devices, tensors, attribute lists and op invocation, in-process or through a deepxd daemon.
//
// Each method is one call of the C API. A runtime is made by NewRuntime (in-process; load
// plugins with LoadPlugin) or by Connect (the daemon's plugins); the rest of a program is the
// same for both:
//
//	rt, err := deepx.NewRuntime(nil) // or deepx.Connect("unix:/run/deepx/deepxd.sock", nil)
//	...
//	defer rt.Close()
//	dev, _ := rt.FindDevice("cpu")
//	x, _ := deepx.NewTensorFrom(rt, dev, []int64{2}, []float32{1, 2})
//	defer x.Close()
//	err = rt.InvokeByName("dx.add", []*deepx.Tensor{x, x}, []*deepx.Tensor{x}, nil)
//
// Ownership: every Runtime, Tensor, Attrs and Program is closed with Close, which is
// idempotent; other methods of a closed value fail with StatusFailedPrecondition. A finalizer only reports a value
// that was never closed (SetLeakLogger) and releases it. Tensors outlive their runtime's Close,
// as host.h says. Go memory is passed to C for the duration of a call only.
//
// Goroutines: every method may be called from many goroutines at once; Close waits for the
// calls in flight on the value, which is how the binding keeps host.h's rule that a handle is not
// destroyed while another thread uses it. Tensor data itself is not serialised.
//
// Contexts: InvokeContext and Program.Submit (a list of invokes run as one task) go through
// the runtime's task queue (dx_invoke_async(), dx_program_submit()) and stop waiting when their
// context is done; a task still queued is cancelled and never runs, a running one finishes in
// the background with its tensors borrowed (their Close waits for it). Invoke stays the
// cheapest call.
//
// Errors: a failing call returns an *Error carrying the Status of deepx/status.h; Status values
// are sentinels for errors.Is, and errors.As reaches the fields.
package deepx
