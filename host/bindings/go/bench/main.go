// Command bench is the Go side of the bindings benchmark (issue 17, item 7;
// host/bindings/bench/run_bench.py builds and runs it beside the C, Python and Java programs):
// the calls of host/bindings/bench/bench_c.c made through this package as a Go program would
// make them, on tensors made once.
//
//	bench PLUGIN TINY_MS ADD_CALLS ADD_ELEMS
//
// Prints "tiny_ns <x>" (rt.Invoke of dx.add on 1-element f32 tensors, the median of 5 batches
// of about TINY_MS/5 ms) and "add_ms <x>" (rt.Invoke of dx.add on ADD_ELEMS f32 elements, the
// median of ADD_CALLS calls after a warm-up), and "cgo_nop_ns <x>": a cgo call of an empty C
// function, timed the same way, which is the part of the per-call cost that no Go code can
// remove.
package main

// static void deepx_bench_nop(void) {}
import "C"

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"time"

	deepx "github.com/deepx/deepx-go"
)

func fail(err error) {
	fmt.Fprintln(os.Stderr, "deepx-bench-bindings-go:", err)
	os.Exit(1)
}

func must[T any](v T, err error) T {
	if err != nil {
		fail(err)
	}
	return v
}

func median(v []float64) float64 {
	sort.Float64s(v)
	return v[len(v)/2]
}

// ones makes a, b (holding 1) and y, each of n f32 elements.
func ones(rt *deepx.Runtime, dev int, n int64) (a, b, y *deepx.Tensor) {
	data := make([]float32, n)
	for i := range data {
		data[i] = 1
	}
	a = must(deepx.NewTensorFrom(rt, dev, []int64{n}, data))
	b = must(deepx.NewTensorFrom(rt, dev, []int64{n}, data))
	y = must(rt.NewTensor(dev, deepx.F32, n))
	return a, b, y
}

func main() {
	if len(os.Args) != 5 {
		fmt.Fprintln(os.Stderr, "usage: bench PLUGIN TINY_MS ADD_CALLS ADD_ELEMS")
		os.Exit(2)
	}
	tinyMS := must(strconv.ParseFloat(os.Args[2], 64))
	addCalls := must(strconv.Atoi(os.Args[3]))
	if addCalls < 1 {
		addCalls = 1
	}
	addElems := must(strconv.ParseInt(os.Args[4], 10, 64))

	rt := must(deepx.NewRuntime(nil))
	defer rt.Close()
	must(rt.LoadPlugin(os.Args[1]))
	dev := must(rt.FindDevice("cpu"))
	add := must(rt.Op("dx.add"))

	// tiny: calibrate a batch to about TINY_MS/10, then 5 batches.
	a, b, y := ones(rt, dev, 1)
	batch := 1000
	for {
		start := time.Now()
		for i := 0; i < batch; i++ {
			if err := rt.Invoke(add, []*deepx.Tensor{a, b}, []*deepx.Tensor{y}, nil); err != nil {
				fail(err)
			}
		}
		if float64(time.Since(start).Milliseconds()) >= tinyMS/10 || batch > 1<<28 {
			break
		}
		batch *= 2
	}
	tiny := make([]float64, 5)
	for r := range tiny {
		start := time.Now()
		for i := 0; i < batch; i++ {
			if err := rt.Invoke(add, []*deepx.Tensor{a, b}, []*deepx.Tensor{y}, nil); err != nil {
				fail(err)
			}
		}
		tiny[r] = float64(time.Since(start).Nanoseconds()) / float64(batch)
	}
	if got := must(deepx.ReadSlice[float32](y)); got[0] != 2 {
		fail(fmt.Errorf("1 + 1 gave %v", got[0]))
	}
	fmt.Printf("tiny_ns %.2f\n", median(tiny))
	for r := range tiny {
		start := time.Now()
		for i := 0; i < batch; i++ {
			C.deepx_bench_nop()
		}
		tiny[r] = float64(time.Since(start).Nanoseconds()) / float64(batch)
	}
	fmt.Printf("cgo_nop_ns %.2f\n", median(tiny))
	a.Close()
	b.Close()
	y.Close()

	// add: a warm-up call, then ADD_CALLS timed calls.
	a, b, y = ones(rt, dev, addElems)
	defer a.Close()
	defer b.Close()
	defer y.Close()
	if err := rt.Invoke(add, []*deepx.Tensor{a, b}, []*deepx.Tensor{y}, nil); err != nil {
		fail(err)
	}
	big := make([]float64, addCalls)
	for r := range big {
		start := time.Now()
		if err := rt.Invoke(add, []*deepx.Tensor{a, b}, []*deepx.Tensor{y}, nil); err != nil {
			fail(err)
		}
		big[r] = float64(time.Since(start).Nanoseconds()) / 1e6
	}
	fmt.Printf("add_ms %.4f\n", median(big))
}
