package deepx

// #include "deepxgo.h"
import "C"

import (
	"fmt"
	"unsafe"
)

// maxTensors is dx_invoke()'s limit on inputs and on outputs.
const maxTensors = 64

// Invoke runs op synchronously (dx_invoke()): inputs are read, outputs (allocated by the
// caller with the op's output shapes, docs/ops.md) are written. A nil input passes an absent
// optional input; attrs may be nil. The same tensor may appear several times.
//
// Errors: StatusNotFound for an op id the runtime does not know, StatusShapeMismatch for
// tensors that do not fit the op, StatusUnsupported when no kernel serves the dtypes or
// device, StatusFailedPrecondition for a closed runtime, tensor or attribute list, or the
// kernel's own error.
func (r *Runtime) Invoke(op Op, inputs, outputs []*Tensor, attrs *Attrs) error {
	return r.invoke("Runtime.Invoke", op.ID, inputs, outputs, attrs)
}

// InvokeByName resolves the op by name, then invokes it as Invoke does. Resolve once with Op
// where a call repeats.
func (r *Runtime) InvokeByName(name string, inputs, outputs []*Tensor, attrs *Attrs) error {
	op, err := r.Op(name)
	if err != nil {
		return err
	}
	return r.invoke("Runtime.InvokeByName", op.ID, inputs, outputs, attrs)
}

// invoke takes no defer: the releases are written out, which keeps the per-call cost down.
func (r *Runtime) invoke(call string, op uint32, inputs, outputs []*Tensor, attrs *Attrs) error {
	if len(inputs) > maxTensors || len(outputs) > maxTensors {
		return newError(StatusOutOfRange, call, "%d inputs and %d outputs (at most %d each)",
			len(inputs), len(outputs), maxTensors)
	}
	if !r.g.acquire() {
		return closedError(call, "runtime")
	}
	err := r.invokeEntered(call, op, inputs, outputs, attrs)
	r.g.release()
	return err
}

// invokeEntered holds every tensor (Close waits) and the attribute list for the call.
func (r *Runtime) invokeEntered(call string, op uint32, inputs, outputs []*Tensor, attrs *Attrs) error {
	if err := acquireAll(call, "input", inputs); err != nil {
		return err
	}
	if err := acquireAll(call, "output", outputs); err != nil {
		releaseAll(inputs)
		return err
	}
	var ah *C.dx_attrs_t
	if attrs != nil {
		attrs.mu.RLock()
		if attrs.closed {
			attrs.mu.RUnlock()
			releaseAll(outputs)
			releaseAll(inputs)
			return closedError(call, "attribute list")
		}
		ah = attrs.h
	}
	var e *C.dx_error_t
	if len(inputs) <= 4 && len(outputs) <= 2 {
		var in [4]C.uintptr_t
		var out [2]C.uintptr_t
		for i, t := range inputs {
			in[i] = handleBits(handleOf(t))
		}
		for i, t := range outputs {
			out[i] = handleBits(handleOf(t))
		}
		e = C.deepxgo_invoke_small(handleBits(r.h), C.dx_op_id_t(op), in[0], in[1], in[2], in[3],
			C.int32_t(len(inputs)), out[0], out[1], C.int32_t(len(outputs)), handleBits(ah))
	} else {
		e = invokeLarge(r.h, op, inputs, outputs, ah)
	}
	if attrs != nil {
		attrs.mu.RUnlock()
	}
	releaseAll(outputs)
	releaseAll(inputs)
	return takeError(call, e)
}

// invokeLarge passes more tensors than deepxgo_invoke_small takes: the handle arrays in C
// memory, freed when the call returns.
func invokeLarge(rt *C.dx_runtime_t, op uint32, inputs, outputs []*Tensor, ah *C.dx_attrs_t) *C.dx_error_t {
	size := C.size_t(unsafe.Sizeof((*C.dx_tensor_t)(nil)))
	in := (*[maxTensors]*C.dx_tensor_t)(C.calloc(C.size_t(maxTensors), size))
	defer C.free(unsafe.Pointer(in))
	out := (*[maxTensors]*C.dx_tensor_t)(C.calloc(C.size_t(maxTensors), size))
	defer C.free(unsafe.Pointer(out))
	for i, t := range inputs {
		in[i] = handleOf(t)
	}
	for i, t := range outputs {
		out[i] = handleOf(t)
	}
	return C.dx_invoke(rt, C.dx_op_id_t(op), &in[0], C.int32_t(len(inputs)), &out[0],
		C.int32_t(len(outputs)), ah)
}

func handleOf(t *Tensor) *C.dx_tensor_t {
	if t == nil {
		return nil
	}
	return t.h
}

// handleBits is a handle as the integer it is (host.h: handles are opaque values, not
// addresses).
func handleBits[T any](h *T) C.uintptr_t { return C.uintptr_t(uintptr(unsafe.Pointer(h))) }

func acquireAll(call, role string, ts []*Tensor) error {
	for i, t := range ts {
		if t != nil && !t.g.acquire() {
			releaseAll(ts[:i])
			return closedError(call, fmt.Sprintf("%s tensor %d", role, i))
		}
	}
	return nil
}

func releaseAll(ts []*Tensor) {
	for _, t := range ts {
		if t != nil {
			t.g.release()
		}
	}
}
