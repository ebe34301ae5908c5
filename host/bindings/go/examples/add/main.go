// Command add runs dx.add on deepx's CPU plugin from Go and prints the sum.
package main

import (
	"fmt"
	"log"

	deepx "github.com/deepx/deepx-go"
)

// must stops the program on an error: a *deepx.Error reads "deepx: <method>: <STATUS>: <message>".
func must[T any](v T, err error) T {
	if err != nil {
		log.Fatal(err)
	}
	return v
}

func main() {
	rt := must(deepx.NewRuntime(nil)) // remote: deepx.Connect("unix:/run/deepx/deepxd.sock", nil)
	defer rt.Close()
	must(rt.LoadPlugin("cpu"))
	dev := must(rt.FindDevice("cpu"))
	a := must(deepx.NewTensorFrom(rt, dev, []int64{3}, []float32{1, 2, 3}))
	defer a.Close()
	sum := must(rt.NewTensor(dev, deepx.F32, 3))
	defer sum.Close()
	must(0, rt.InvokeByName("dx.add", []*deepx.Tensor{a, a}, []*deepx.Tensor{sum}, nil))
	fmt.Println("a + a =", must(deepx.ReadSlice[float32](sum))) // a + a = [2 4 6]
}
