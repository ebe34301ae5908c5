package deepx

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// Many goroutines on one runtime: each makes its own tensors, adds, reads and checks against
// Go's sum, while all of them read one shared input and list the registries; others sum rows
// with one shared attribute list that a further goroutine keeps setting.
func TestManyGoroutines(t *testing.T) {
	rt := testRuntime(t)
	defer mustClose(t, rt)
	dev := cpuDevice(t, rt)
	const n = 64
	shared := make([]float32, n)
	for i := range shared {
		shared[i] = float32(i)
	}
	sa, err := NewTensorFrom(rt, dev, []int64{n}, shared)
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, sa)
	add, err := rt.Op("dx.add")
	if err != nil {
		t.Fatal(err)
	}
	sum, err := rt.Op("dx.sum")
	if err != nil {
		t.Fatal(err)
	}
	attrs, err := NewAttrs()
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, attrs)
	if err := attrs.SetInts("axes", []int64{1}); err != nil {
		t.Fatal(err)
	}
	rows, err := NewTensorFrom(rt, dev, []int64{2, 2}, []float64{1, 2, 3, 4})
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, rows)

	const adders, summers, iterations = 12, 4, 40
	errs := make(chan error, adders+summers+1)
	stop := make(chan struct{})
	var wg, setter sync.WaitGroup
	for w := 0; w < adders; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			errs <- func() error {
				mine := make([]float32, n)
				for it := 0; it < iterations; it++ {
					for i := range mine {
						mine[i] = float32(w*1000 + it)
					}
					x, err := NewTensorFrom(rt, dev, []int64{n}, mine)
					if err != nil {
						return err
					}
					y, err := rt.NewTensor(dev, F32, n)
					if err != nil {
						x.Close()
						return err
					}
					err = rt.Invoke(add, []*Tensor{sa, x}, []*Tensor{y}, nil)
					var got []float32
					if err == nil {
						got, err = ReadSlice[float32](y)
					}
					x.Close()
					y.Close()
					if err != nil {
						return err
					}
					for i := range got {
						if want := shared[i] + mine[i]; got[i] != want {
							return fmt.Errorf("adder %d iteration %d element %d: %v, want %v", w, it, i, got[i], want)
						}
					}
					if it%10 == 0 {
						if _, err := rt.Ops(); err != nil {
							return err
						}
						if _, err := rt.Devices(); err != nil {
							return err
						}
					}
				}
				return nil
			}()
		}(w)
	}
	for w := 0; w < summers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			errs <- func() error {
				y, err := rt.NewTensor(dev, F64, 2)
				if err != nil {
					return err
				}
				defer y.Close()
				for it := 0; it < iterations; it++ {
					if err := rt.Invoke(sum, []*Tensor{rows}, []*Tensor{y}, attrs); err != nil {
						return err
					}
					got, err := ReadSlice[float64](y)
					if err != nil {
						return err
					}
					if got[0] != 3 || got[1] != 7 {
						return fmt.Errorf("summer %d: row sums %v, want [3 7]", w, got)
					}
				}
				return nil
			}()
		}(w)
	}
	setter.Add(1)
	go func() { // replaces the attributes while the summers pass them (same values)
		defer setter.Done()
		for {
			select {
			case <-stop:
				errs <- nil
				return
			default:
			}
			if err := attrs.SetInts("axes", []int64{1}); err != nil {
				errs <- err
				return
			}
			if err := attrs.SetBool("keepdims", false); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(stop)
	setter.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// Close racing with calls on the same tensor and runtime: every call either completes or is
// refused with StatusFailedPrecondition; nothing crashes (host.h's rule that a handle is not
// destroyed while in use is kept by the binding's wait).
func TestCloseRacesWithUse(t *testing.T) {
	rt := testRuntime(t)
	dev := cpuDevice(t, rt)
	x, err := NewTensorFrom(rt, dev, []int64{1024}, make([]float32, 1024))
	if err != nil {
		t.Fatal(err)
	}
	add, _ := rt.Op("dx.add")
	const workers = 12
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, refused := 0, 0
	bad := []error{}
	// record counts a call's outcome and reports whether it was refused.
	record := func(err error) bool {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case err == nil:
			ok++
		case errors.Is(err, StatusFailedPrecondition):
			refused++
			return true
		default:
			bad = append(bad, err)
		}
		return false
	}
	completed := func() int {
		mu.Lock()
		defer mu.Unlock()
		return ok
	}
	// Each worker calls until it is refused once (after the Closes below), or 30 s pass.
	deadline := time.Now().Add(30 * time.Second)
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if g%2 == 0 {
					if _, err := ReadSlice[float32](x); record(err) {
						return
					}
					continue
				}
				y, err := rt.NewTensor(dev, F32, 1024)
				if record(err) {
					return
				}
				if err != nil {
					continue
				}
				refusedNow := record(rt.Invoke(add, []*Tensor{x, x}, []*Tensor{y}, nil))
				record(y.Close())
				if refusedNow {
					return
				}
			}
		}(g)
	}
	for completed() < 100 && time.Now().Before(deadline) { // the workers are in full swing
		time.Sleep(time.Millisecond)
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if len(bad) > 0 {
		t.Fatalf("%d unexpected errors, first: %v", len(bad), bad[0])
	}
	if refused < workers || ok < 100 {
		t.Fatalf("%d calls completed, %d refused: every worker must have been refused once after Close", ok, refused)
	}
	t.Logf("%d calls completed, %d refused after Close", ok, refused)
}
