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

func (r *Runtime) invoke(call string, op uint32, inputs, outputs []*Tensor, attrs *Attrs) error {
	if len(inputs) > maxTensors || len(outputs) > maxTensors {
		return newError(StatusOutOfRange, call, "%d inputs and %d outputs (at most %d each)",
			len(inputs), len(outputs), maxTensors)
	}
	if err := r.enter(call); err != nil {
		return err
	}
	defer r.leave()
	// Every tensor stays acquired (Close waits) until the call returns.
	if err := acquireAll(call, "input", inputs); err != nil {
		return err
	}
	defer releaseAll(inputs)
	if err := acquireAll(call, "output", outputs); err != nil {
		return err
	}
	defer releaseAll(outputs)
	var ah *C.dx_attrs_t
	if attrs != nil {
		attrs.mu.RLock()
		defer attrs.mu.RUnlock()
		if attrs.closed {
			return closedError(call, "attribute list")
		}
		ah = attrs.h
	}
	if len(inputs) <= 4 && len(outputs) <= 2 {
		var in [4]C.uintptr_t
		var out [2]C.uintptr_t
		for i, t := range inputs {
			in[i] = handleBits(handleOf(t))
		}
		for i, t := range outputs {
			out[i] = handleBits(handleOf(t))
		}
		return takeError(call, C.deepxgo_invoke_small(handleBits(r.h), C.dx_op_id_t(op),
			in[0], in[1], in[2], in[3], C.int32_t(len(inputs)), out[0], out[1],
			C.int32_t(len(outputs)), handleBits(ah)))
	}
	// More tensors: the handle arrays in C memory, freed when the call returns.
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
	return takeError(call, C.dx_invoke(r.h, C.dx_op_id_t(op), &in[0], C.int32_t(len(inputs)),
		&out[0], C.int32_t(len(outputs)), ah))
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
