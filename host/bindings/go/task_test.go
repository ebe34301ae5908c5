package deepx

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// "Promptly" in these tests: a generous bound, far above the wait slice (10 ms), that a call
// which waited for a long program to end would still exceed.
const promptly = 5 * time.Second

func mustOp(t *testing.T, rt *Runtime, name string) Op {
	t.Helper()
	op, err := rt.Op(name)
	if err != nil {
		t.Fatalf("Op(%s): %v", name, err)
	}
	return op
}

func mustTensor(t *testing.T, rt *Runtime, dev int, shape []int64, data []float32) *Tensor {
	t.Helper()
	x, err := NewTensorFrom(rt, dev, shape, data)
	if err != nil {
		t.Fatalf("NewTensorFrom: %v", err)
	}
	return x
}

func readF32(t *testing.T, x *Tensor) []float32 {
	t.Helper()
	v, err := ReadSlice[float32](x)
	if err != nil {
		t.Fatalf("ReadSlice: %v", err)
	}
	return v
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// longProgram is a program of 1024x1024 matmuls in a chain (a, b -> c; c, b -> a; ...) that
// runs for about d: the number of steps comes from timing a few of them first (at most the
// 4096 steps a program takes). The caller closes the tensors and the program.
func longProgram(t *testing.T, rt *Runtime, d time.Duration) (*Program, []*Tensor) {
	t.Helper()
	dev := cpuDevice(t, rt)
	matmul := mustOp(t, rt, "dx.matmul")
	data := make([]float32, 1024*1024)
	for i := range data {
		data[i] = float32(i%7) / 7
	}
	a := mustTensor(t, rt, dev, []int64{1024, 1024}, data)
	b := mustTensor(t, rt, dev, []int64{1024, 1024}, data)
	c := mustTensor(t, rt, dev, []int64{1024, 1024}, data)
	build := func(n int) *Program {
		p, err := rt.NewProgram()
		if err != nil {
			t.Fatalf("NewProgram: %v", err)
		}
		for i := 0; i < n; i++ {
			in, out := a, c
			if i%2 == 1 {
				in, out = c, a
			}
			if err := p.Add(matmul, []*Tensor{in, b}, []*Tensor{out}, nil); err != nil {
				t.Fatalf("Program.Add(step %d): %v", i, err)
			}
		}
		return p
	}
	const probe = 4
	p := build(probe)
	start := time.Now()
	if err := p.Submit(context.Background()); err != nil {
		t.Fatalf("Submit of %d matmuls: %v", probe, err)
	}
	n := int(int64(d) * probe / int64(time.Since(start)+1))
	mustClose(t, p)
	if n < probe {
		n = probe
	}
	if n > 4096 {
		n = 4096
	}
	t.Logf("a program of %d matmuls, about %v", n, d)
	return build(n), []*Tensor{a, b, c}
}

func TestInvokeContextMatchesInvoke(t *testing.T) {
	rt := testRuntime(t)
	defer mustClose(t, rt)
	dev := cpuDevice(t, rt)
	add := mustOp(t, rt, "dx.add")
	a := mustTensor(t, rt, dev, []int64{3}, []float32{1, 2, 3})
	defer mustClose(t, a)
	y := mustTensor(t, rt, dev, []int64{3}, []float32{0, 0, 0})
	defer mustClose(t, y)
	if err := rt.InvokeContext(context.Background(), add, []*Tensor{a, a}, []*Tensor{y}, nil); err != nil {
		t.Fatalf("InvokeContext: %v", err)
	}
	if got := readF32(t, y); !equalF32(got, []float32{2, 4, 6}) {
		t.Errorf("a + a = %v, want [2 4 6]", got)
	}
	// The kernel's errors come back as Invoke's.
	bad := mustTensor(t, rt, dev, []int64{2}, []float32{0, 0})
	defer mustClose(t, bad)
	err := rt.InvokeContext(context.Background(), add, []*Tensor{a, a}, []*Tensor{bad}, nil)
	if !errors.Is(err, StatusShapeMismatch) {
		t.Errorf("InvokeContext with a wrong output shape: %v, want SHAPE_MISMATCH", err)
	}
}

func TestInvokeContextAlreadyCancelled(t *testing.T) {
	rt := testRuntime(t)
	defer mustClose(t, rt)
	dev := cpuDevice(t, rt)
	add := mustOp(t, rt, "dx.add")
	a := mustTensor(t, rt, dev, []int64{3}, []float32{1, 2, 3})
	defer mustClose(t, a)
	y := mustTensor(t, rt, dev, []int64{3}, []float32{9, 9, 9})
	defer mustClose(t, y)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // before the call
	err := rt.InvokeContext(ctx, add, []*Tensor{a, a}, []*Tensor{y}, nil)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, StatusCancelled) {
		t.Fatalf("InvokeContext(cancelled ctx) = %v, want context.Canceled and CANCELLED", err)
	}
	p, err := rt.NewProgram()
	if err != nil {
		t.Fatalf("NewProgram: %v", err)
	}
	defer mustClose(t, p)
	if err := p.Add(add, []*Tensor{a, a}, []*Tensor{y}, nil); err != nil {
		t.Fatalf("Program.Add: %v", err)
	}
	if err := p.Submit(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Program.Submit(cancelled ctx) = %v, want context.Canceled", err)
	}
	if got := readF32(t, y); !equalF32(got, []float32{9, 9, 9}) {
		t.Errorf("output after a cancelled call = %v, want it untouched [9 9 9]", got)
	}
}

func TestProgramDeadlineOnLongChain(t *testing.T) {
	rt := testRuntime(t)
	defer mustClose(t, rt)
	p, ts := longProgram(t, rt, 3*time.Second)
	defer mustClose(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := p.Submit(ctx)
	elapsed := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, StatusTimeout) {
		t.Fatalf("Submit with a 100 ms deadline = %v, want context.DeadlineExceeded and TIMEOUT", err)
	}
	if elapsed > promptly {
		t.Errorf("Submit returned after %v, want promptly after its deadline", elapsed)
	}
	var de *Error
	if !errors.As(err, &de) || !strings.Contains(de.Message, "running") {
		t.Errorf("error %v: want the message to say the program was running", err)
	}
	// Later calls still work: a sync invoke now, and a queued one that runs once the
	// abandoned program is done (its tasks run in order).
	dev := cpuDevice(t, rt)
	add := mustOp(t, rt, "dx.add")
	x := mustTensor(t, rt, dev, []int64{2}, []float32{1, 2})
	defer mustClose(t, x)
	y := mustTensor(t, rt, dev, []int64{2}, []float32{0, 0})
	defer mustClose(t, y)
	if err := rt.Invoke(add, []*Tensor{x, x}, []*Tensor{y}, nil); err != nil {
		t.Fatalf("Invoke after the deadline: %v", err)
	}
	if err := rt.InvokeContext(context.Background(), mustOp(t, rt, "dx.mul"), []*Tensor{x, x}, []*Tensor{y}, nil); err != nil {
		t.Fatalf("InvokeContext after the deadline: %v", err)
	}
	if got := readF32(t, y); !equalF32(got, []float32{1, 4}) {
		t.Errorf("x * x = %v, want [1 4]", got)
	}
	// The program's tensors are closed last: their Close waits for the program if need be.
	for _, x := range ts {
		mustClose(t, x)
	}
}

func TestInvokeContextCancelWhileQueued(t *testing.T) {
	rt := testRuntime(t)
	defer mustClose(t, rt)
	// Everything is made before the blocker runs: on a remote runtime a synchronous call
	// waits for the connection's request in progress.
	p, ts := longProgram(t, rt, 2*time.Second)
	defer mustClose(t, p)
	dev := cpuDevice(t, rt)
	add := mustOp(t, rt, "dx.add")
	a := mustTensor(t, rt, dev, []int64{3}, []float32{1, 2, 3})
	defer mustClose(t, a)
	y := mustTensor(t, rt, dev, []int64{3}, []float32{9, 9, 9})
	defer mustClose(t, y)
	ctx, cancel := context.WithCancel(context.Background())
	// A long program holds the runtime's executor: its Submit gives up at once, the program
	// goes on running.
	short, cancelShort := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancelShort()
	if err := p.Submit(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Submit of the blocker = %v, want context.DeadlineExceeded", err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		cancel()
	}()
	start := time.Now()
	err := rt.InvokeContext(ctx, add, []*Tensor{a, a}, []*Tensor{y}, nil)
	if !errors.Is(err, context.Canceled) || !errors.Is(err, StatusCancelled) {
		t.Fatalf("InvokeContext queued behind a long program, cancelled = %v, want context.Canceled and CANCELLED", err)
	}
	if time.Since(start) > promptly {
		t.Errorf("InvokeContext returned after %v, want promptly after the cancel", time.Since(start))
	}
	var de *Error
	if !errors.As(err, &de) || !strings.Contains(de.Message, "never runs") {
		t.Errorf("error %v: want the message to say the task never runs", err)
	}
	// Wait for the blocker (a task queued after it runs after it), then check that the
	// cancelled add never ran.
	if err := rt.InvokeContext(context.Background(), add, []*Tensor{a, a}, []*Tensor{a}, nil); err != nil {
		t.Fatalf("InvokeContext after the blocker: %v", err)
	}
	if got := readF32(t, y); !equalF32(got, []float32{9, 9, 9}) {
		t.Errorf("output of the cancelled invoke = %v, want it untouched [9 9 9]", got)
	}
	if got := readF32(t, a); !equalF32(got, []float32{2, 4, 6}) {
		t.Errorf("a + a = %v, want [2 4 6]", got)
	}
	for _, x := range ts {
		mustClose(t, x)
	}
}

func TestProgramEqualsSyncCalls(t *testing.T) {
	rt := testRuntime(t)
	defer mustClose(t, rt)
	dev := cpuDevice(t, rt)
	matmul, add, relu := mustOp(t, rt, "dx.matmul"), mustOp(t, rt, "dx.add"), mustOp(t, rt, "dx.relu")
	a := mustTensor(t, rt, dev, []int64{2, 3}, []float32{1, -2, 3, -4, 5, -6})
	b := mustTensor(t, rt, dev, []int64{3, 2}, []float32{0.5, -1, 2, 0.25, -3, 1})
	bias := mustTensor(t, rt, dev, []int64{2}, []float32{1, -10})
	mm := mustTensor(t, rt, dev, []int64{2, 2}, make([]float32, 4))
	sum := mustTensor(t, rt, dev, []int64{2, 2}, make([]float32, 4))
	y := mustTensor(t, rt, dev, []int64{2, 2}, make([]float32, 4))
	for _, x := range []*Tensor{a, b, bias, mm, sum, y} {
		defer mustClose(t, x)
	}
	for _, step := range []struct {
		op      Op
		in, out []*Tensor
	}{{matmul, []*Tensor{a, b}, []*Tensor{mm}}, {add, []*Tensor{mm, bias}, []*Tensor{sum}}, {relu, []*Tensor{sum}, []*Tensor{y}}} {
		if err := rt.Invoke(step.op, step.in, step.out, nil); err != nil {
			t.Fatalf("Invoke(%s): %v", step.op.Name, err)
		}
	}
	want := readF32(t, y)
	if err := WriteSlice(y, make([]float32, 4)); err != nil {
		t.Fatal(err)
	}
	if err := WriteSlice(mm, make([]float32, 4)); err != nil {
		t.Fatal(err)
	}
	p, err := rt.NewProgram()
	if err != nil {
		t.Fatalf("NewProgram: %v", err)
	}
	defer mustClose(t, p)
	for _, err := range []error{
		p.Add(matmul, []*Tensor{a, b}, []*Tensor{mm}, nil),
		p.Add(add, []*Tensor{mm, bias}, []*Tensor{sum}, nil),
		p.Add(relu, []*Tensor{sum}, []*Tensor{y}, nil),
	} {
		if err != nil {
			t.Fatalf("Program.Add: %v", err)
		}
	}
	if p.Len() != 3 {
		t.Errorf("Len = %d, want 3", p.Len())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Submit(ctx); err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if got := readF32(t, y); !equalF32(got, want) {
		t.Errorf("program matmul -> add -> relu = %v, the three Invoke calls gave %v", got, want)
	}
	// A program may be submitted again.
	if err := p.Submit(ctx); err != nil {
		t.Fatalf("second Submit: %v", err)
	}
	if got := readF32(t, y); !equalF32(got, want) {
		t.Errorf("second submission = %v, want %v", got, want)
	}
}

func TestProgramBadStep(t *testing.T) {
	rt := testRuntime(t)
	defer mustClose(t, rt)
	dev := cpuDevice(t, rt)
	add, relu := mustOp(t, rt, "dx.add"), mustOp(t, rt, "dx.relu")
	a := mustTensor(t, rt, dev, []int64{3}, []float32{-1, 2, -3})
	y := mustTensor(t, rt, dev, []int64{3}, make([]float32, 3))
	wrong := mustTensor(t, rt, dev, []int64{2}, []float32{7, 7})
	z := mustTensor(t, rt, dev, []int64{3}, []float32{5, 5, 5})
	for _, x := range []*Tensor{a, y, wrong, z} {
		defer mustClose(t, x)
	}
	p, err := rt.NewProgram()
	if err != nil {
		t.Fatalf("NewProgram: %v", err)
	}
	defer mustClose(t, p)
	for _, err := range []error{
		p.Add(relu, []*Tensor{a}, []*Tensor{y}, nil),
		p.Add(add, []*Tensor{a, a}, []*Tensor{wrong}, nil), // shape mismatch when it runs
		p.Add(relu, []*Tensor{a}, []*Tensor{z}, nil),
	} {
		if err != nil {
			t.Fatalf("Program.Add: %v", err)
		}
	}
	err = p.Submit(context.Background())
	var se *StepError
	if !errors.As(err, &se) {
		t.Fatalf("Submit = %v, want a *StepError", err)
	}
	if se.Step != 1 || se.Op.Name != "dx.add" {
		t.Errorf("StepError names step %d (%s), want step 1 (dx.add)", se.Step, se.Op.Name)
	}
	if !errors.Is(err, StatusShapeMismatch) {
		t.Errorf("Submit = %v, want SHAPE_MISMATCH", err)
	}
	if got := readF32(t, y); !equalF32(got, []float32{0, 2, 0}) {
		t.Errorf("step 0's output = %v, want [0 2 0]", got)
	}
	if got := readF32(t, z); !equalF32(got, []float32{5, 5, 5}) {
		t.Errorf("step 2's output = %v, want it untouched (the program stops at step 1)", got)
	}
	// An empty program is refused.
	empty, err := rt.NewProgram()
	if err != nil {
		t.Fatalf("NewProgram: %v", err)
	}
	defer mustClose(t, empty)
	if err := empty.Submit(context.Background()); !errors.Is(err, StatusInvalidArgument) {
		t.Errorf("Submit of an empty program = %v, want INVALID_ARGUMENT", err)
	}
}

func TestProgramClosedTensorAndClosedProgram(t *testing.T) {
	rt := testRuntime(t)
	defer mustClose(t, rt)
	dev := cpuDevice(t, rt)
	relu := mustOp(t, rt, "dx.relu")
	a := mustTensor(t, rt, dev, []int64{2}, []float32{-1, 1})
	y := mustTensor(t, rt, dev, []int64{2}, []float32{3, 3})
	defer mustClose(t, y)
	p, err := rt.NewProgram()
	if err != nil {
		t.Fatalf("NewProgram: %v", err)
	}
	if err := p.Add(relu, []*Tensor{a}, []*Tensor{y}, nil); err != nil {
		t.Fatalf("Program.Add: %v", err)
	}
	mustClose(t, a)
	if err := p.Submit(context.Background()); !errors.Is(err, StatusFailedPrecondition) {
		t.Errorf("Submit with a closed tensor = %v, want FAILED_PRECONDITION", err)
	}
	if got := readF32(t, y); !equalF32(got, []float32{3, 3}) {
		t.Errorf("output = %v, want it untouched", got)
	}
	mustClose(t, p)
	mustClose(t, p) // idempotent
	if err := p.Submit(context.Background()); !errors.Is(err, StatusFailedPrecondition) {
		t.Errorf("Submit of a closed program = %v, want FAILED_PRECONDITION", err)
	}
	if err := p.Add(relu, []*Tensor{y}, []*Tensor{y}, nil); !errors.Is(err, StatusFailedPrecondition) {
		t.Errorf("Add to a closed program = %v, want FAILED_PRECONDITION", err)
	}
}

// A tensor's Close waits for a running task that borrows it, even one its caller abandoned.
func TestTensorCloseWaitsForAbandonedTask(t *testing.T) {
	rt := testRuntime(t)
	defer mustClose(t, rt)
	p, ts := longProgram(t, rt, time.Second)
	defer mustClose(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := p.Submit(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Submit = %v, want context.DeadlineExceeded", err)
	}
	for _, x := range ts {
		mustClose(t, x) // returns once the program is done with it
	}
	// The runtime is still usable and its executor free: a new task runs.
	dev := cpuDevice(t, rt)
	x := mustTensor(t, rt, dev, []int64{1}, []float32{2})
	defer mustClose(t, x)
	if err := rt.InvokeContext(context.Background(), mustOp(t, rt, "dx.add"), []*Tensor{x, x}, []*Tensor{x}, nil); err != nil {
		t.Fatalf("InvokeContext: %v", err)
	}
	if got := readF32(t, x); !equalF32(got, []float32{4}) {
		t.Errorf("x + x = %v, want [4]", got)
	}
}
