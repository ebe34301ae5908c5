package deepx

// #include "deepxgo.h"
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// DType is a deepx dtype packed as in dx_dtype_t: code | bits << 8 | lanes << 16.
type DType uint32

// The dtypes deepx knows (DX_DTYPE_*).
const (
	F64  DType = C.DX_DTYPE_F64
	F32  DType = C.DX_DTYPE_F32
	F16  DType = C.DX_DTYPE_F16
	BF16 DType = C.DX_DTYPE_BF16
	I64  DType = C.DX_DTYPE_I64
	I32  DType = C.DX_DTYPE_I32
	I16  DType = C.DX_DTYPE_I16
	I8   DType = C.DX_DTYPE_I8
	U8   DType = C.DX_DTYPE_U8
	Bool DType = C.DX_DTYPE_BOOL
)

// String is the dtype's short name ("f32"), as dx_dtype_string() gives it.
func (d DType) String() string { return C.GoString(C.dx_dtype_string(C.dx_dtype_t(d))) }

// Size is the size of one element in bytes.
func (d DType) Size() int { return int((d>>8)&0xff) * int((d>>16)&0xffff) / 8 }

// Tensor is a deepx tensor (dx_tensor_t): in the runtime's process, or in the daemon for a
// remote runtime. Shape, DType, NumEl and Device are fixed at creation and stay readable after
// Close; every other method fails with StatusFailedPrecondition once the tensor is closed.
//
// Methods may be called from many goroutines at once, and Close waits for the calls in flight
// on the tensor (host.h forbids destroying a tensor while another thread uses it). Concurrent
// writes to one tensor, or a write concurrent with a read, race on its elements as they would
// in C. A tensor outlives its runtime: after Runtime.Close it still reads, writes and closes.
type Tensor struct {
	h      *C.dx_tensor_t
	g      guard
	dtype  DType
	shape  []int64
	numel  int64
	device int
}

// NewTensor allocates a compact row-major tensor on device (an index from Devices or
// FindDevice); the contents are uninitialised (dx_tensor_create()).
func (r *Runtime) NewTensor(device int, dtype DType, shape ...int64) (*Tensor, error) {
	const call = "Runtime.NewTensor"
	if err := r.enter(call); err != nil {
		return nil, err
	}
	defer r.leave()
	if len(shape) > 32 {
		return nil, newError(StatusInvalidArgument, call, "rank %d is above 32", len(shape))
	}
	var h *C.dx_tensor_t
	if err := takeError(call, C.dx_tensor_create(r.h, C.int32_t(device), C.dx_dtype_t(dtype),
		int64Ptr(shape), C.int32_t(len(shape)), &h)); err != nil {
		return nil, err
	}
	return newTensor(h, dtype, shape, device), nil
}

func newTensor(h *C.dx_tensor_t, dtype DType, shape []int64, device int) *Tensor {
	t := &Tensor{h: h, dtype: dtype, shape: append([]int64(nil), shape...), numel: 1, device: device}
	for _, n := range shape {
		t.numel *= n
	}
	liveHandles.Add(1)
	runtime.SetFinalizer(t, (*Tensor).finalize)
	return t
}

// DType is the tensor's element type.
func (t *Tensor) DType() DType { return t.dtype }

// Shape returns a copy of the tensor's shape.
func (t *Tensor) Shape() []int64 { return append([]int64(nil), t.shape...) }

// NumEl is the number of elements (the product of the shape).
func (t *Tensor) NumEl() int64 { return t.numel }

// Device is the index of the device holding the tensor.
func (t *Tensor) Device() int { return t.device }

// ByteSize is NumEl times the element size: the length Read and Write take.
func (t *Tensor) ByteSize() int64 { return t.numel * int64(t.dtype.Size()) }

func (t *Tensor) String() string { return fmt.Sprintf("deepx.Tensor(%s %v)", t.dtype, t.shape) }

// Close destroys the tensor handle (dx_tensor_destroy()) after the calls in flight on it
// return; the storage is freed when no view of it is left. Closing twice is a no-op.
func (t *Tensor) Close() error {
	if !t.g.close() {
		return nil
	}
	runtime.SetFinalizer(t, nil)
	liveHandles.Add(-1)
	return takeError("Tensor.Close", C.dx_tensor_destroy(t.h))
}

func (t *Tensor) finalize() {
	if t.g.close() {
		liveHandles.Add(-1)
		reportLeak(fmt.Sprintf("deepx: a Tensor (%s %v) was never closed; the garbage collector released it",
			t.dtype, t.shape))
		C.dx_error_destroy(C.dx_tensor_destroy(t.h))
	}
}

// Write copies data (ByteSize bytes, elements in row-major order) into the tensor
// (dx_tensor_write()). The bytes are copied during the call; nothing of data is kept.
func (t *Tensor) Write(data []byte) error {
	return t.write("Tensor.Write", bytesPtr(data), len(data))
}

// Read copies the tensor's elements, in row-major order, into data (ByteSize bytes)
// (dx_tensor_read()).
func (t *Tensor) Read(data []byte) error {
	return t.read("Tensor.Read", bytesPtr(data), len(data))
}

// write and read pass Go memory to C for the duration of the call only (cgo's rule): the
// host copies the bytes and keeps no pointer to them.
func (t *Tensor) write(call string, p unsafe.Pointer, n int) error {
	if !t.g.acquire() {
		return closedError(call, "tensor")
	}
	defer t.g.release()
	return takeError(call, C.dx_tensor_write(t.h, p, C.uint64_t(n)))
}

func (t *Tensor) read(call string, p unsafe.Pointer, n int) error {
	if !t.g.acquire() {
		return closedError(call, "tensor")
	}
	defer t.g.release()
	return takeError(call, C.dx_tensor_read(t.h, p, C.uint64_t(n)))
}

// View makes a new tensor viewing this one's storage with another shape, strides (in
// elements; nil for compact row-major) and element offset (dx_tensor_view()). The storage
// lives until its last view is closed; close the view like any tensor.
func (t *Tensor) View(shape, strides []int64, offset int64) (*Tensor, error) {
	const call = "Tensor.View"
	if !t.g.acquire() {
		return nil, closedError(call, "tensor")
	}
	defer t.g.release()
	if strides != nil && len(strides) != len(shape) {
		return nil, newError(StatusInvalidArgument, call, "%d strides for a shape of rank %d",
			len(strides), len(shape))
	}
	var h *C.dx_tensor_t
	if err := takeError(call, C.dx_tensor_view(t.h, int64Ptr(shape), int64Ptr(strides),
		C.int32_t(len(shape)), C.int64_t(offset), &h)); err != nil {
		return nil, err
	}
	return newTensor(h, t.dtype, shape, t.device), nil
}

// Copy copies the elements of src into dst: same dtype and shape, any devices and strides
// (dx_tensor_copy()).
func (r *Runtime) Copy(dst, src *Tensor) error {
	const call = "Runtime.Copy"
	if err := r.enter(call); err != nil {
		return err
	}
	defer r.leave()
	if !dst.g.acquire() {
		return closedError(call, "destination tensor")
	}
	defer dst.g.release()
	if !src.g.acquire() {
		return closedError(call, "source tensor")
	}
	defer src.g.release()
	return takeError(call, C.dx_tensor_copy(r.h, dst.h, src.h))
}

// Element is a Go type whose values have the layout of a deepx dtype: float32 (F32), float64
// (F64), int64, int32, int16, int8, uint8 and bool (one byte, 0 or 1).
type Element interface {
	float32 | float64 | int64 | int32 | int16 | int8 | uint8 | bool
}

// DTypeOf is the dtype whose elements have T's layout.
func DTypeOf[T Element]() DType {
	var zero T
	switch any(zero).(type) {
	case float32:
		return F32
	case float64:
		return F64
	case int64:
		return I64
	case int32:
		return I32
	case int16:
		return I16
	case int8:
		return I8
	case uint8:
		return U8
	default:
		return Bool
	}
}

// WriteSlice writes data into t, which must have T's dtype and len(data) elements.
func WriteSlice[T Element](t *Tensor, data []T) error {
	const call = "WriteSlice"
	if err := checkSlice[T](call, t, len(data)); err != nil {
		return err
	}
	var p unsafe.Pointer
	if len(data) > 0 {
		p = unsafe.Pointer(&data[0])
	}
	return t.write(call, p, len(data)*t.dtype.Size())
}

// ReadSlice reads t, which must have T's dtype, into a new slice.
func ReadSlice[T Element](t *Tensor) ([]T, error) {
	const call = "ReadSlice"
	if err := checkSlice[T](call, t, int(t.numel)); err != nil {
		return nil, err
	}
	out := make([]T, t.numel)
	var p unsafe.Pointer
	if len(out) > 0 {
		p = unsafe.Pointer(&out[0])
	}
	if err := t.read(call, p, len(out)*t.dtype.Size()); err != nil {
		return nil, err
	}
	return out, nil
}

// NewTensorFrom allocates a tensor of T's dtype and the given shape on device and writes data
// into it.
func NewTensorFrom[T Element](r *Runtime, device int, shape []int64, data []T) (*Tensor, error) {
	t, err := r.NewTensor(device, DTypeOf[T](), shape...)
	if err != nil {
		return nil, err
	}
	if err := WriteSlice(t, data); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

func checkSlice[T Element](call string, t *Tensor, n int) error {
	if want := DTypeOf[T](); t.dtype != want {
		return newError(StatusInvalidArgument, call, "a []%T slice for a tensor of dtype %s (needs %s)",
			*new(T), t.dtype, want)
	}
	if int64(n) != t.numel {
		return newError(StatusInvalidArgument, call, "%d elements for a tensor of %d", n, t.numel)
	}
	return nil
}

func int64Ptr(s []int64) *C.int64_t {
	if len(s) == 0 {
		return nil
	}
	return (*C.int64_t)(unsafe.Pointer(&s[0]))
}

func bytesPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}
