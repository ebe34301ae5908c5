package deepx

import (
	"math"
	"math/rand"
	"testing"
)

func TestAddValuesF32(t *testing.T) {
	rt := testRuntime(t)
	defer mustClose(t, rt)
	dev := cpuDevice(t, rt)
	rng := rand.New(rand.NewSource(1))
	shape := []int64{3, 5}
	a, b := make([]float32, 15), make([]float32, 15)
	for i := range a {
		a[i], b[i] = rng.Float32()*10-5, rng.Float32()*10-5
	}
	ta, err := NewTensorFrom(rt, dev, shape, a)
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, ta)
	tb, err := NewTensorFrom(rt, dev, shape, b)
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, tb)
	out, err := rt.NewTensor(dev, F32, shape...)
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, out)
	add, err := rt.Op("dx.add")
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Invoke(add, []*Tensor{ta, tb}, []*Tensor{out}, nil); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSlice[float32](out)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if want := a[i] + b[i]; got[i] != want {
			t.Fatalf("element %d: %v + %v = %v, deepx says %v", i, a[i], b[i], want, got[i])
		}
	}
	if s := out.Shape(); len(s) != 2 || s[0] != 3 || s[1] != 5 || out.NumEl() != 15 || out.DType() != F32 {
		t.Fatalf("out is %v", out)
	}
}

func TestAddValuesI64ByName(t *testing.T) {
	rt := testRuntime(t)
	defer mustClose(t, rt)
	dev := cpuDevice(t, rt)
	a := []int64{1, -2, 3, 1 << 40}
	b := []int64{10, 20, -30, 5}
	ta, _ := NewTensorFrom(rt, dev, []int64{4}, a)
	tb, _ := NewTensorFrom(rt, dev, []int64{4}, b)
	out, err := rt.NewTensor(dev, I64, 4)
	if err != nil || ta == nil || tb == nil {
		t.Fatal("tensors:", err)
	}
	defer func() { mustClose(t, ta); mustClose(t, tb); mustClose(t, out) }()
	if err := rt.InvokeByName("dx.add", []*Tensor{ta, tb}, []*Tensor{out}, nil); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSlice[int64](out)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if got[i] != a[i]+b[i] {
			t.Fatalf("element %d: got %d, want %d", i, got[i], a[i]+b[i])
		}
	}
}

// matmul computes a (m x k) times b (k x n) in float64, as the reference.
func matmul(a, b []float64, m, k, n int) []float64 {
	y := make([]float64, m*n)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				s += a[i*k+p] * b[p*n+j]
			}
			y[i*n+j] = s
		}
	}
	return y
}

func TestMatmulValues(t *testing.T) {
	rt := testRuntime(t)
	defer mustClose(t, rt)
	dev := cpuDevice(t, rt)
	const m, k, n = 7, 13, 5
	rng := rand.New(rand.NewSource(2))
	a64, b64 := make([]float64, m*k), make([]float64, k*n)
	for i := range a64 {
		a64[i] = rng.Float64()*2 - 1
	}
	for i := range b64 {
		b64[i] = rng.Float64()*2 - 1
	}
	want := matmul(a64, b64, m, k, n)

	// f64: the Go loop and the kernel may sum in different orders; 1e-12 covers that.
	ta, _ := NewTensorFrom(rt, dev, []int64{m, k}, a64)
	tb, _ := NewTensorFrom(rt, dev, []int64{k, n}, b64)
	ty, err := rt.NewTensor(dev, F64, m, n)
	if err != nil || ta == nil || tb == nil {
		t.Fatal("tensors:", err)
	}
	defer func() { mustClose(t, ta); mustClose(t, tb); mustClose(t, ty) }()
	if err := rt.InvokeByName("dx.matmul", []*Tensor{ta, tb}, []*Tensor{ty}, nil); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSlice[float64](ty)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if math.Abs(got[i]-want[i]) > 1e-12 {
			t.Fatalf("f64 element %d: got %v, want %v", i, got[i], want[i])
		}
	}

	// f32, with b given transposed (n x k) and the transpose_b attribute.
	a32 := make([]float32, m*k)
	bt32 := make([]float32, n*k)
	for i := range a32 {
		a32[i] = float32(a64[i])
	}
	for p := 0; p < k; p++ {
		for j := 0; j < n; j++ {
			bt32[j*k+p] = float32(b64[p*n+j])
		}
	}
	want32 := matmul(f64s(a32), transpose(f64s(bt32), n, k), m, k, n)
	xa, _ := NewTensorFrom(rt, dev, []int64{m, k}, a32)
	xb, _ := NewTensorFrom(rt, dev, []int64{n, k}, bt32)
	xy, err := rt.NewTensor(dev, F32, m, n)
	if err != nil || xa == nil || xb == nil {
		t.Fatal("tensors:", err)
	}
	defer func() { mustClose(t, xa); mustClose(t, xb); mustClose(t, xy) }()
	attrs, err := NewAttrs()
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, attrs)
	if err := attrs.SetBool("transpose_b", true); err != nil {
		t.Fatal(err)
	}
	mm, err := rt.Op("dx.matmul")
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Invoke(mm, []*Tensor{xa, xb}, []*Tensor{xy}, attrs); err != nil {
		t.Fatal(err)
	}
	got32, err := ReadSlice[float32](xy)
	if err != nil {
		t.Fatal(err)
	}
	for i := range want32 {
		// 13 products of values below 1 in f32: a few ulps of 13.
		if math.Abs(float64(got32[i])-want32[i]) > 1e-5 {
			t.Fatalf("f32 element %d: got %v, want %v", i, got32[i], want32[i])
		}
	}
}

func f64s(x []float32) []float64 {
	y := make([]float64, len(x))
	for i, v := range x {
		y[i] = float64(v)
	}
	return y
}

func transpose(x []float64, rows, cols int) []float64 {
	y := make([]float64, len(x))
	for i := 0; i < rows; i++ {
		for j := 0; j < cols; j++ {
			y[j*rows+i] = x[i*cols+j]
		}
	}
	return y
}

func TestSumWithAttrs(t *testing.T) {
	rt := testRuntime(t)
	defer mustClose(t, rt)
	dev := cpuDevice(t, rt)
	x, err := NewTensorFrom(rt, dev, []int64{2, 3}, []float64{1, 2, 3, 4, 5, 6})
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, x)
	y, err := rt.NewTensor(dev, F64, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, y)
	attrs, err := NewAttrs()
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, attrs)
	if err := attrs.SetInts("axes", []int64{1}); err != nil {
		t.Fatal(err)
	}
	if err := rt.InvokeByName("dx.sum", []*Tensor{x}, []*Tensor{y}, attrs); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSlice[float64](y)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != 6 || got[1] != 15 {
		t.Fatalf("sum over axis 1 of [[1 2 3] [4 5 6]]: got %v, want [6 15]", got)
	}
}

func TestViewAndCopy(t *testing.T) {
	rt := testRuntime(t)
	defer mustClose(t, rt)
	dev := cpuDevice(t, rt)
	x, err := NewTensorFrom(rt, dev, []int64{2, 3}, []float32{1, 2, 3, 4, 5, 6})
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, x)
	// The transpose as a strided view: shape [3, 2], strides [1, 3].
	v, err := x.View([]int64{3, 2}, []int64{1, 3}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, v)
	got, err := ReadSlice[float32](v)
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{1, 4, 2, 5, 3, 6}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("transposed view: got %v, want %v", got, want)
		}
	}
	dst, err := rt.NewTensor(dev, F32, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer mustClose(t, dst)
	if err := rt.Copy(dst, v); err != nil {
		t.Fatal(err)
	}
	got, _ = ReadSlice[float32](dst)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("copy of the view: got %v, want %v", got, want)
		}
	}
	// A write through the base is visible through the view (same storage).
	if err := WriteSlice(x, []float32{10, 20, 30, 40, 50, 60}); err != nil {
		t.Fatal(err)
	}
	got, _ = ReadSlice[float32](v)
	if got[1] != 40 {
		t.Fatalf("view after writing the base: got %v", got)
	}
	// Raw bytes round trip.
	raw := make([]byte, x.ByteSize())
	if err := x.Read(raw); err != nil {
		t.Fatal(err)
	}
	if err := dst.Write(raw); err != nil {
		t.Fatal(err)
	}
}

func TestListing(t *testing.T) {
	rt := testRuntime(t)
	defer mustClose(t, rt)
	if ABIVersion()>>16 != HeaderABIVersion>>16 {
		t.Fatalf("library ABI %s, headers %s: majors differ", versionString(ABIVersion()),
			versionString(HeaderABIVersion))
	}
	plugins, err := rt.Plugins()
	if err != nil {
		t.Fatal(err)
	}
	var cpu *Plugin
	for i := range plugins {
		if plugins[i].Name == "cpu" {
			cpu = &plugins[i]
		}
	}
	if cpu == nil {
		t.Fatalf("no cpu plugin among %+v", plugins)
	}
	if cpu.NumKernels <= 0 || cpu.NumMemorySpaces <= 0 || cpu.Index != 0 {
		t.Fatalf("cpu plugin: %+v", *cpu)
	}
	// The wire protocol's PluginInfo carries no ABI version or path: a remote runtime reports 0
	// and "" for them.
	if remoteAddr == "" && (cpu.ABIVersion>>16 != 1 || cpu.Path == "") {
		t.Fatalf("cpu plugin: %+v", *cpu)
	}
	devices, err := rt.Devices()
	if err != nil {
		t.Fatal(err)
	}
	dev := cpuDevice(t, rt)
	if dev < 0 || dev >= len(devices) || devices[dev].Name != "cpu" || devices[dev].DeviceType != 1 {
		t.Fatalf("devices %+v, cpu at %d", devices, dev)
	}
	// Nor does its DeviceInfo carry the alignment.
	if remoteAddr == "" && devices[dev].Alignment == 0 {
		t.Fatalf("devices %+v, cpu at %d", devices, dev)
	}
	ops, err := rt.Ops()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]uint32{}
	for _, op := range ops {
		found[op.Name] = op.ID
	}
	for _, name := range []string{"dx.add", "dx.matmul", "dx.sum"} {
		id, ok := found[name]
		if !ok {
			t.Fatalf("%s missing from %d ops", name, len(ops))
		}
		op, err := rt.Op(name)
		if err != nil || op.ID != id || op.Name != name {
			t.Fatalf("Op(%s) = %+v, %v; listed with id %d", name, op, err, id)
		}
	}
	if rt.Remote() != (remoteAddr != "") {
		t.Fatalf("Remote() = %v in this mode", rt.Remote())
	}
}
