package deepx

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// wantStatus fails unless err is a *Error of the given status, checked both ways a caller
// would: errors.Is against the sentinel, errors.As to read the fields.
func wantStatus(t *testing.T, what string, err error, status Status) *Error {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error, want %s", what, status)
	}
	if !errors.Is(err, status) {
		t.Fatalf("%s: %v, want %s", what, err, status)
	}
	var de *Error
	if !errors.As(err, &de) || de.Status != status || de.Message == "" || de.Call == "" {
		t.Fatalf("%s: errors.As gave %#v", what, de)
	}
	if !strings.Contains(err.Error(), status.String()) {
		t.Fatalf("%s: %q does not name %s", what, err.Error(), status)
	}
	return de
}

func TestStatusNames(t *testing.T) {
	if StatusNotFound.String() != "NOT_FOUND" || StatusOK.String() != "OK" {
		t.Fatalf("names: %s %s", StatusNotFound, StatusOK)
	}
	if s := Status(1000).String(); s != "UNKNOWN(1000)" {
		t.Fatalf("an unknown code reads %q", s)
	}
	if errors.Is(&Error{Status: StatusNotFound}, StatusUnsupported) {
		t.Fatal("errors.Is matched another status")
	}
	if F32.String() != "f32" || F32.Size() != 4 || Bool.Size() != 1 || DTypeOf[int16]() != I16 {
		t.Fatal("dtype names or sizes")
	}
}

func TestUnknownOp(t *testing.T) {
	rt := testRuntime(t)
	defer mustClose(t, rt)
	_, err := rt.Op("example.no_such_op")
	de := wantStatus(t, "Op(example.no_such_op)", err, StatusNotFound)
	if de.Call != "Runtime.Op" {
		t.Fatalf("Call = %q", de.Call)
	}
	dev := cpuDevice(t, rt)
	x, _ := rt.NewTensor(dev, F32, 2)
	defer mustClose(t, x)
	wantStatus(t, "InvokeByName(no such op)", rt.InvokeByName("example.no_such_op", []*Tensor{x}, []*Tensor{x}, nil), StatusNotFound)
	wantStatus(t, "Invoke(bad id)", rt.Invoke(Op{ID: 1 << 30}, []*Tensor{x}, []*Tensor{x}, nil), StatusNotFound)
	_, err = rt.FindDevice("no-such-device")
	wantStatus(t, "FindDevice", err, StatusNotFound)
	// Strings cross as UTF-8 both ways.
	_, err = rt.FindDevice("gerät-ü")
	if de := wantStatus(t, "FindDevice(gerät-ü)", err, StatusNotFound); !strings.Contains(de.Message, "'gerät-ü'") {
		t.Fatalf("the message lost the name: %q", de.Message)
	}
}

func TestWrongDTypeAndShape(t *testing.T) {
	rt := testRuntime(t)
	defer mustClose(t, rt)
	dev := cpuDevice(t, rt)
	a, _ := rt.NewTensor(dev, F32, 2, 3)
	b64, _ := rt.NewTensor(dev, F64, 2, 3)
	b32, _ := rt.NewTensor(dev, F32, 3, 2)
	out, err := rt.NewTensor(dev, F32, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { mustClose(t, a); mustClose(t, b64); mustClose(t, b32); mustClose(t, out) }()
	add, _ := rt.Op("dx.add")
	// Mixed dtypes reach kernel matching, which finds no (f32, f64) kernel and lists those there are.
	de := wantStatus(t, "add f32 + f64", rt.Invoke(add, []*Tensor{a, b64}, []*Tensor{out}, nil), StatusUnsupported)
	if !strings.Contains(de.Message, "(f32, f32) -> (f32)") {
		t.Fatalf("the message does not list the kernels: %q", de.Message)
	}
	wantStatus(t, "add [2,3] + [3,2]", rt.Invoke(add, []*Tensor{a, b32}, []*Tensor{out}, nil), StatusShapeMismatch)
	wantStatus(t, "add with one input", rt.Invoke(add, []*Tensor{a}, []*Tensor{out}, nil), StatusInvalidArgument)

	// The binding's own checks of Go slices, before any C call.
	wantStatus(t, "WriteSlice of float64 into f32", WriteSlice(a, make([]float64, 6)), StatusInvalidArgument)
	wantStatus(t, "WriteSlice of 5 into 6", WriteSlice(a, make([]float32, 5)), StatusInvalidArgument)
	_, err = ReadSlice[int32](a)
	wantStatus(t, "ReadSlice[int32] of f32", err, StatusInvalidArgument)
	// The host's checks of byte counts.
	wantStatus(t, "Write of 8 bytes into 24", a.Write(make([]byte, 8)), StatusInvalidArgument)
	wantStatus(t, "Read of 100 bytes from 24", a.Read(make([]byte, 100)), StatusInvalidArgument)

	_, err = rt.NewTensor(dev, F32, -1)
	wantStatus(t, "NewTensor with a negative size", err, StatusInvalidArgument)
	_, err = rt.NewTensor(1000, F32, 2)
	wantStatus(t, "NewTensor on device 1000", err, StatusOutOfRange)
	_, err = a.View([]int64{4, 3}, nil, 0)
	wantStatus(t, "View reaching outside", err, StatusOutOfRange)

	attrs, _ := NewAttrs()
	defer mustClose(t, attrs)
	if err := attrs.SetString("bogus", "x"); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, "add with an attribute not in its schema",
		rt.Invoke(add, []*Tensor{a, a}, []*Tensor{out}, attrs), StatusInvalidArgument)
}

func TestLoadPluginErrors(t *testing.T) {
	if remoteAddr != "" {
		rt := testRuntime(t)
		defer mustClose(t, rt)
		_, err := rt.LoadPlugin(cpuPlugin)
		wantStatus(t, "LoadPlugin on a remote runtime", err, StatusUnsupported)
		_, err = rt.DeviceStats(0)
		wantStatus(t, "DeviceStats on a remote runtime", err, StatusUnsupported)
		return
	}
	rt := testRuntime(t)
	defer mustClose(t, rt)
	_, err := rt.LoadPlugin(cpuPlugin)
	wantStatus(t, "loading the cpu plugin twice", err, StatusAlreadyExists)
	_, err = rt.LoadPlugin("/nonexistent/libdeepx-plugin-none.so")
	wantStatus(t, "LoadPlugin of a missing file", err, StatusNotFound)
}

func TestConnectRefusals(t *testing.T) {
	_, err := Connect("unix:/nonexistent/deepxd.sock", nil)
	if remoteAddr == "" && errors.Is(err, StatusUnsupported) {
		// In-process runs also go where the host library has no remote client yet (a 1.0
		// library, or a 1.1 one whose dx_runtime_connect is a stub); the refusal must say so.
		t.Logf("this host library has no remote client: %v", err)
		return
	}
	wantStatus(t, "Connect to nothing", err, StatusUnavailable)
	_, err = Connect("tcp:127.0.0.1:1", nil)
	wantStatus(t, "Connect over tcp", err, StatusUnsupported)
	_, err = Connect("", nil)
	wantStatus(t, "Connect to an empty address", err, StatusInvalidArgument)
}

func TestUseAfterClose(t *testing.T) {
	rt := testRuntime(t)
	defer mustClose(t, rt)
	dev := cpuDevice(t, rt)
	x, err := NewTensorFrom(rt, dev, []int64{2}, []float32{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	y, _ := rt.NewTensor(dev, F32, 2)
	defer mustClose(t, y)
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if err := x.Close(); err != nil {
		t.Fatalf("a second Close: %v (Close is idempotent)", err)
	}
	_, err = ReadSlice[float32](x)
	wantStatus(t, "ReadSlice after Close", err, StatusFailedPrecondition)
	wantStatus(t, "Write after Close", x.Write(make([]byte, 8)), StatusFailedPrecondition)
	_, err = x.View([]int64{2}, nil, 0)
	wantStatus(t, "View after Close", err, StatusFailedPrecondition)
	de := wantStatus(t, "Invoke with a closed input",
		rt.InvokeByName("dx.add", []*Tensor{y, x}, []*Tensor{y}, nil), StatusFailedPrecondition)
	if !strings.Contains(de.Message, "input tensor 1") {
		t.Fatalf("the message does not name the input: %q", de.Message)
	}
	wantStatus(t, "Copy from a closed tensor", rt.Copy(y, x), StatusFailedPrecondition)
	if s := x.Shape(); len(s) != 1 || s[0] != 2 {
		t.Fatalf("Shape after Close: %v", s)
	}

	attrs, _ := NewAttrs()
	mustClose(t, attrs)
	mustClose(t, attrs)
	wantStatus(t, "SetInt after Close", attrs.SetInt("n", 1), StatusFailedPrecondition)
	wantStatus(t, "Invoke with closed attrs",
		rt.InvokeByName("dx.add", []*Tensor{y, y}, []*Tensor{y}, attrs), StatusFailedPrecondition)
}

// host.h: dx_runtime_destroy() invalidates the runtime handle at once; its tensors stay fully
// usable, and the plugins shut down when the last of them is destroyed.
func TestRuntimeClosedWhileTensorsLive(t *testing.T) {
	rt := testRuntime(t)
	dev := cpuDevice(t, rt)
	x, err := NewTensorFrom(rt, dev, []int64{3}, []float32{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	y, _ := rt.NewTensor(dev, F32, 3)
	add, _ := rt.Op("dx.add")
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatalf("a second Runtime.Close: %v", err)
	}
	_, err = rt.NewTensor(dev, F32, 3)
	wantStatus(t, "NewTensor on a closed runtime", err, StatusFailedPrecondition)
	wantStatus(t, "Invoke on a closed runtime", rt.Invoke(add, []*Tensor{x, x}, []*Tensor{y}, nil), StatusFailedPrecondition)
	_, err = rt.Ops()
	wantStatus(t, "Ops on a closed runtime", err, StatusFailedPrecondition)
	_, err = rt.Plugins()
	wantStatus(t, "Plugins on a closed runtime", err, StatusFailedPrecondition)

	// The tensors still read, write and view.
	if err := WriteSlice(y, []float32{7, 8, 9}); err != nil {
		t.Fatalf("Write after Runtime.Close: %v", err)
	}
	got, err := ReadSlice[float32](x)
	if err != nil || got[2] != 3 {
		t.Fatalf("Read after Runtime.Close: %v %v", got, err)
	}
	v, err := y.View([]int64{1}, nil, 2)
	if err != nil {
		t.Fatalf("View after Runtime.Close: %v", err)
	}
	got, err = ReadSlice[float32](v)
	if err != nil || got[0] != 9 {
		t.Fatalf("the view: %v %v", got, err)
	}
	mustClose(t, v)
	mustClose(t, x)
	mustClose(t, y)
}

// A daemon that dies while calls are in flight: each call completes or fails with
// StatusUnavailable, later calls fail with it at once, and closing the handles still succeeds.
// Remote mode only (it starts a daemon of its own, so that the suite's stays up).
func TestDaemonDiesMidCall(t *testing.T) {
	if remoteAddr == "" {
		t.Log("in-process run: there is no daemon to lose (the remote run covers this)")
		return
	}
	d, err := startDaemon()
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop()
	rt, err := Connect(d.address, nil)
	if err != nil {
		t.Fatal(err)
	}
	dev := cpuDevice(t, rt)
	const n = 512
	a, err := NewTensorFrom(rt, dev, []int64{n, n}, make([]float32, n*n))
	if err != nil {
		t.Fatal(err)
	}
	y, _ := rt.NewTensor(dev, F32, n, n)
	mm, _ := rt.Op("dx.matmul")
	results := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() {
			var err error
			for j := 0; j < 50 && err == nil; j++ {
				err = rt.Invoke(mm, []*Tensor{a, a}, []*Tensor{y}, nil)
			}
			results <- err
		}()
	}
	time.Sleep(50 * time.Millisecond)
	d.kill()
	for i := 0; i < 4; i++ {
		if err := <-results; err != nil {
			wantStatus(t, "a call in flight when the daemon died", err, StatusUnavailable)
		}
	}
	_, err = ReadSlice[float32](a)
	wantStatus(t, "a read after the daemon died", err, StatusUnavailable)
	wantStatus(t, "an invoke after the daemon died", rt.Invoke(mm, []*Tensor{a, a}, []*Tensor{y}, nil), StatusUnavailable)
	mustClose(t, a)
	mustClose(t, y)
	mustClose(t, rt)
}
