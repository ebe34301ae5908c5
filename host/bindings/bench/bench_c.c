/* The C side of the bindings benchmark (issue 17, item 7; run_bench.py runs it beside the Python,
 * Go and Java programs that make the same calls): an in-process runtime with the CPU plugin,
 * tensors made once, then
 *   tiny:  dx_invoke of dx.add on 1-element f32 tensors, back to back for about TINY_MS ms
 *          (5 batches; the median ns per call);
 *   add:   dx_invoke of dx.add on ADD_ELEMS f32 elements per tensor, ADD_CALLS calls after a
 *          warm-up (the median ms per call).
 *
 *   deepx-bench-bindings-c PLUGIN TINY_MS ADD_CALLS ADD_ELEMS
 *
 * Prints "tiny_ns <x>" and "add_ms <x>" (the lines run_bench.py reads); exit 1 on any error. */
#include <deepx/host.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void check(dx_error_t* e, const char* what) {
  if (e == NULL) return;
  fprintf(stderr, "deepx-bench-bindings-c: %s: %s: %s\n", what,
          dx_status_string(dx_error_code(e)), dx_error_message(e, NULL));
  dx_error_destroy(e);
  exit(1);
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

/* Three f32 tensors of n elements on device dev; a and b hold 1.0f. */
static void make(dx_runtime_t* rt, int32_t dev, int64_t n, dx_tensor_t* t[3]) {
  float* ones = malloc((size_t)n * sizeof(float));
  if (ones == NULL) {
    fprintf(stderr, "deepx-bench-bindings-c: out of memory\n");
    exit(1);
  }
  for (int64_t i = 0; i < n; ++i) ones[i] = 1.0f;
  for (int i = 0; i < 3; ++i) check(dx_tensor_create(rt, dev, DX_DTYPE_F32, &n, 1, &t[i]), "dx_tensor_create");
  check(dx_tensor_write(t[0], ones, (uint64_t)n * sizeof(float)), "dx_tensor_write");
  check(dx_tensor_write(t[1], ones, (uint64_t)n * sizeof(float)), "dx_tensor_write");
  free(ones);
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s PLUGIN TINY_MS ADD_CALLS ADD_ELEMS\n", argv[0]);
    return 2;
  }
  const double tiny_ms = atof(argv[2]);
  const int add_calls = atoi(argv[3]) > 0 ? atoi(argv[3]) : 1;
  const int64_t add_elems = atoll(argv[4]);

  dx_runtime_t* rt = NULL;
  check(dx_runtime_create(NULL, &rt), "dx_runtime_create");
  int32_t plugin = -1;
  check(dx_runtime_load_plugin(rt, argv[1], &plugin), "dx_runtime_load_plugin");
  int32_t dev = -1;
  check(dx_runtime_find_device(rt, "cpu", &dev), "dx_runtime_find_device");
  dx_op_id_t add = 0;
  check(dx_runtime_op_lookup(rt, "dx.add", &add), "dx_runtime_op_lookup");

  /* tiny: calibrate a batch to about tiny_ms / 5, then 5 batches. */
  dx_tensor_t* s[3];
  make(rt, dev, 1, s);
  dx_tensor_t* s_in[2] = {s[0], s[1]};
  long batch = 1000;
  for (;;) {
    double t0 = now_ns();
    for (long i = 0; i < batch; ++i) check(dx_invoke(rt, add, s_in, 2, &s[2], 1, NULL), "dx_invoke");
    double ms = (now_ns() - t0) / 1e6;
    if (ms >= tiny_ms / 10 || batch > (1L << 28)) break;
    batch *= 2;
  }
  double tiny[5];
  for (int r = 0; r < 5; ++r) {
    double t0 = now_ns();
    for (long i = 0; i < batch; ++i) check(dx_invoke(rt, add, s_in, 2, &s[2], 1, NULL), "dx_invoke");
    tiny[r] = (now_ns() - t0) / (double)batch;
  }
  float y0 = 0.0f;
  check(dx_tensor_read(s[2], &y0, sizeof y0), "dx_tensor_read");
  if (y0 != 2.0f) {
    fprintf(stderr, "deepx-bench-bindings-c: 1 + 1 gave %g\n", (double)y0);
    return 1;
  }
  printf("tiny_ns %.2f\n", median(tiny, 5));
  for (int i = 0; i < 3; ++i) check(dx_tensor_destroy(s[i]), "dx_tensor_destroy");

  /* add: a warm-up call (first touch of the output), then add_calls timed calls. */
  dx_tensor_t* l[3];
  make(rt, dev, add_elems, l);
  dx_tensor_t* l_in[2] = {l[0], l[1]};
  check(dx_invoke(rt, add, l_in, 2, &l[2], 1, NULL), "dx_invoke");
  double* big = malloc((size_t)add_calls * sizeof(double));
  for (int r = 0; r < add_calls; ++r) {
    double t0 = now_ns();
    check(dx_invoke(rt, add, l_in, 2, &l[2], 1, NULL), "dx_invoke");
    big[r] = (now_ns() - t0) / 1e6;
  }
  printf("add_ms %.4f\n", median(big, add_calls));
  free(big);
  for (int i = 0; i < 3; ++i) check(dx_tensor_destroy(l[i]), "dx_tensor_destroy");
  check(dx_runtime_destroy(rt), "dx_runtime_destroy");
  return 0;
}
