package deepx

// #include "deepxgo.h"
import "C"

import (
	"runtime"
	"sync"
	"unsafe"
)

// Attrs is a reusable list of named, typed op attributes (dx_attrs_t), passed to Invoke.
//
// Setters and Close take the list exclusively and Invoke takes it shared, so one Attrs may be
// used by many goroutines' Invoke calls while another goroutine changes it (host.h forbids a
// set concurrent with other uses; the binding serialises them).
type Attrs struct {
	h      *C.dx_attrs_t
	mu     sync.RWMutex
	closed bool
}

// NewAttrs creates an empty attribute list (dx_attrs_create()).
func NewAttrs() (*Attrs, error) {
	var h *C.dx_attrs_t
	if err := takeError("NewAttrs", C.dx_attrs_create(&h)); err != nil {
		return nil, err
	}
	a := &Attrs{h: h}
	liveHandles.Add(1)
	runtime.SetFinalizer(a, (*Attrs).finalize)
	return a, nil
}

// Close destroys the list (dx_attrs_destroy()) after the calls using it return. Closing twice
// is a no-op.
func (a *Attrs) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return nil
	}
	a.closed = true
	runtime.SetFinalizer(a, nil)
	liveHandles.Add(-1)
	return takeError("Attrs.Close", C.dx_attrs_destroy(a.h))
}

func (a *Attrs) finalize() {
	if !a.closed {
		a.closed = true
		liveHandles.Add(-1)
		reportLeak("deepx: an Attrs was never closed; the garbage collector released it")
		C.dx_error_destroy(C.dx_attrs_destroy(a.h))
	}
}

// set runs one dx_attrs_set_* call with the name as a C string.
func (a *Attrs) set(call, name string, fn func(h *C.dx_attrs_t, name *C.char) *C.dx_error_t) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return closedError(call, "attribute list")
	}
	s := C.CString(name)
	defer C.free(unsafe.Pointer(s))
	return takeError(call, fn(a.h, s))
}

// SetInt sets (or replaces) an i64 attribute.
func (a *Attrs) SetInt(name string, v int64) error {
	return a.set("Attrs.SetInt", name, func(h *C.dx_attrs_t, n *C.char) *C.dx_error_t {
		return C.dx_attrs_set_i64(h, n, C.int64_t(v))
	})
}

// SetFloat sets (or replaces) an f64 attribute.
func (a *Attrs) SetFloat(name string, v float64) error {
	return a.set("Attrs.SetFloat", name, func(h *C.dx_attrs_t, n *C.char) *C.dx_error_t {
		return C.dx_attrs_set_f64(h, n, C.double(v))
	})
}

// SetBool sets (or replaces) a bool attribute.
func (a *Attrs) SetBool(name string, v bool) error {
	var i C.int32_t
	if v {
		i = 1
	}
	return a.set("Attrs.SetBool", name, func(h *C.dx_attrs_t, n *C.char) *C.dx_error_t {
		return C.dx_attrs_set_bool(h, n, i)
	})
}

// SetString sets (or replaces) a string attribute (UTF-8, no NUL bytes).
func (a *Attrs) SetString(name, v string) error {
	return a.set("Attrs.SetString", name, func(h *C.dx_attrs_t, n *C.char) *C.dx_error_t {
		s := C.CString(v)
		defer C.free(unsafe.Pointer(s))
		return C.dx_attrs_set_string(h, n, s, C.int64_t(len(v)))
	})
}

// SetInts sets (or replaces) an i64-array attribute; the values are copied.
func (a *Attrs) SetInts(name string, v []int64) error {
	return a.set("Attrs.SetInts", name, func(h *C.dx_attrs_t, n *C.char) *C.dx_error_t {
		return C.dx_attrs_set_i64_array(h, n, int64Ptr(v), C.int64_t(len(v)))
	})
}

// SetFloats sets (or replaces) an f64-array attribute; the values are copied.
func (a *Attrs) SetFloats(name string, v []float64) error {
	return a.set("Attrs.SetFloats", name, func(h *C.dx_attrs_t, n *C.char) *C.dx_error_t {
		var p *C.double
		if len(v) > 0 {
			p = (*C.double)(unsafe.Pointer(&v[0]))
		}
		return C.dx_attrs_set_f64_array(h, n, p, C.int64_t(len(v)))
	})
}
