package deepx

// #include <deepx/host.h>
import "C"

import (
	"fmt"
	"strconv"
)

// Status is a deepx status code (deepx/status.h). The values are the C enum's, so a code
// crosses the binding unchanged; a code newer than these constants keeps its number.
//
// Status implements error so that the constants serve as sentinels for errors.Is:
//
//	if errors.Is(err, deepx.StatusNotFound) { ... }
type Status int32

// The status codes of deepx/status.h.
const (
	StatusOK                 Status = C.DX_OK
	StatusInvalidArgument    Status = C.DX_INVALID_ARGUMENT
	StatusOutOfRange         Status = C.DX_OUT_OF_RANGE
	StatusNotFound           Status = C.DX_NOT_FOUND
	StatusAlreadyExists      Status = C.DX_ALREADY_EXISTS
	StatusUnsupported        Status = C.DX_UNSUPPORTED
	StatusOutOfMemory        Status = C.DX_OUT_OF_MEMORY
	StatusVersionMismatch    Status = C.DX_VERSION_MISMATCH
	StatusFailedPrecondition Status = C.DX_FAILED_PRECONDITION
	StatusShapeMismatch      Status = C.DX_SHAPE_MISMATCH
	StatusDeviceError        Status = C.DX_DEVICE_ERROR
	StatusIOError            Status = C.DX_IO_ERROR
	StatusTimeout            Status = C.DX_TIMEOUT
	StatusPluginError        Status = C.DX_PLUGIN_ERROR
	StatusInternal           Status = C.DX_INTERNAL
	StatusArithmeticError    Status = C.DX_ARITHMETIC_ERROR
	StatusPermissionDenied   Status = C.DX_PERMISSION_DENIED
	StatusUnknown            Status = C.DX_UNKNOWN
	StatusCancelled          Status = C.DX_CANCELLED
	StatusUnavailable        Status = C.DX_UNAVAILABLE
	StatusResourceExhausted  Status = C.DX_RESOURCE_EXHAUSTED
	StatusDataLoss           Status = C.DX_DATA_LOSS
)

// String is the code's name as dx_status_string() gives it ("NOT_FOUND"); a code the loaded
// host library does not know reads "UNKNOWN(<number>)".
func (s Status) String() string {
	name := C.GoString(C.dx_status_string(C.dx_status_t(s)))
	if name == "UNKNOWN" && s != StatusUnknown {
		return "UNKNOWN(" + strconv.Itoa(int(s)) + ")"
	}
	return name
}

// Error makes a Status usable as an error value and as a target of errors.Is.
func (s Status) Error() string { return "deepx: " + s.String() }

// Error is what every failing call of this package returns: the deepx status, the method that
// failed and the message. The message is the host's (dx_error_message()) for failures that
// the host reported, or the binding's own for failures caught before any C call (a closed
// handle, a Go slice of the wrong length or element type).
//
//	var de *deepx.Error
//	if errors.As(err, &de) && de.Status == deepx.StatusShapeMismatch { ... }
type Error struct {
	Status  Status
	Call    string // the method of this package, e.g. "Runtime.Invoke"
	Message string

	cause error // the context's error, for a call a context ended (InvokeContext, Program.Submit)
}

func (e *Error) Error() string {
	return "deepx: " + e.Call + ": " + e.Status.String() + ": " + e.Message
}

// Is reports whether target is the Status of e (errors.Is(err, deepx.StatusNotFound)), or an
// *Error with the same Status.
func (e *Error) Is(target error) bool {
	switch t := target.(type) {
	case Status:
		return e.Status == t
	case *Error:
		return t != nil && e.Status == t.Status
	}
	return false
}

// Unwrap gives the context's error (context.Canceled or context.DeadlineExceeded) of a call
// that its context ended, so that errors.Is(err, context.Canceled) holds; nil otherwise.
func (e *Error) Unwrap() error { return e.cause }

// takeError turns a dx_error_t* returned by a deepx call into an error and frees it; null
// is nil. An error is not tied to a thread (docs/error-model.md), so it does not matter that
// the goroutine may have moved to another OS thread since the call returned.
func takeError(call string, e *C.dx_error_t) error {
	if e == nil {
		return nil
	}
	defer C.dx_error_destroy(e)
	var n C.size_t
	msg := C.dx_error_message(e, &n)
	return &Error{Status: Status(C.dx_error_code(e)), Call: call, Message: C.GoStringN(msg, C.int(n))}
}

func newError(status Status, call, format string, args ...any) error {
	return &Error{Status: status, Call: call, Message: fmt.Sprintf(format, args...)}
}

func closedError(call, what string) error {
	return newError(StatusFailedPrecondition, call, "the %s is closed", what)
}
