package deepx

import (
	"runtime"
	"strings"
	"testing"
	"time"
)

// A stress loop of every kind of handle; afterwards the binding's count of open handles and,
// in-process, the CPU device's live allocations and bytes are back where they started.
func TestNoLeakInStressLoop(t *testing.T) {
	rt := testRuntime(t)
	defer mustClose(t, rt)
	dev := cpuDevice(t, rt)
	add, _ := rt.Op("dx.add")
	var before MemoryStats
	if remoteAddr == "" {
		var err error
		if before, err = rt.DeviceStats(dev); err != nil {
			t.Fatal(err)
		}
	}
	handles := LiveHandles()
	data := make([]float32, 1000)
	for i := 0; i < 3000; i++ {
		x, err := NewTensorFrom(rt, dev, []int64{10, 100}, data)
		if err != nil {
			t.Fatal(err)
		}
		y, _ := rt.NewTensor(dev, F32, 10, 100)
		v, err := x.View([]int64{100, 10}, []int64{1, 100}, 0)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := NewAttrs()
		if err := rt.Invoke(add, []*Tensor{x, x}, []*Tensor{y}, nil); err != nil {
			t.Fatal(err)
		}
		// Failing calls must not leak either.
		if err := rt.Invoke(add, []*Tensor{x, v}, []*Tensor{y}, nil); err == nil {
			t.Fatal("add of [10,100] and [100,10] succeeded")
		}
		if _, err := rt.Op("example.no_such_op"); err == nil {
			t.Fatal("lookup of a missing op succeeded")
		}
		x.Close()
		x.Close()
		if err := x.Write(nil); err == nil {
			t.Fatal("Write after Close succeeded")
		}
		v.Close()
		y.Close()
		a.Close()
	}
	if got := LiveHandles(); got != handles {
		t.Fatalf("open handles: %d before the loop, %d after", handles, got)
	}
	if remoteAddr == "" {
		after, err := rt.DeviceStats(dev)
		if err != nil {
			t.Fatal(err)
		}
		if after.LiveAllocations != before.LiveAllocations || after.InUseBytes != before.InUseBytes {
			t.Fatalf("cpu device: %+v before the loop, %+v after", before, after)
		}
		if after.PeakInUseBytes == 0 {
			t.Fatal("the loop allocated nothing on the cpu device")
		}
	}
}

// The finalizer is a safety net: a Tensor dropped without Close is reported as a leak and its
// handle released.
func TestFinalizerReportsLeak(t *testing.T) {
	rt := testRuntime(t)
	defer mustClose(t, rt)
	dev := cpuDevice(t, rt)
	reports := make(chan string, 16)
	SetLeakLogger(func(m string) { reports <- m })
	defer SetLeakLogger(nil)
	handles := LiveHandles()
	func() {
		x, err := rt.NewTensor(dev, F64, 7, 3)
		if err != nil {
			t.Fatal(err)
		}
		_ = x // dropped without Close
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		runtime.GC()
		select {
		case m := <-reports:
			if !strings.Contains(m, "never closed") || !strings.Contains(m, "f64 [7 3]") {
				t.Fatalf("leak report: %q", m)
			}
			if got := LiveHandles(); got != handles {
				t.Fatalf("open handles: %d before, %d after the finalizer", handles, got)
			}
			return
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no leak report within 10 s of dropping a tensor")
		}
	}
}

// The per-call cost of a tiny op through the binding (go test -bench Invoke): dx.add of two
// one-element f32 tensors, the op resolved once.
func BenchmarkInvokeTinyAdd(b *testing.B) {
	rt := testRuntime(b)
	defer rt.Close()
	dev := cpuDevice(b, rt)
	x, _ := NewTensorFrom(rt, dev, []int64{1}, []float32{1})
	y, _ := rt.NewTensor(dev, F32, 1)
	defer x.Close()
	defer y.Close()
	add, _ := rt.Op("dx.add")
	in, out := []*Tensor{x, x}, []*Tensor{y}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := rt.Invoke(add, in, out, nil); err != nil {
			b.Fatal(err)
		}
	}
}
