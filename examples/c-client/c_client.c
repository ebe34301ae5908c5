/* deepx-example-c-client: the host API from plain C.
 *
 * Creates a runtime, loads the bundled "cpu" plugin, makes two 2x3 f32 tensors, interns
 * "dx.add" once and runs it by id, then prints the result. Every fallible call returns a
 * dx_error_t*: NULL on success, otherwise an error this program owns, which says what went
 * wrong (dx_error_code(), dx_error_message()) and is freed with dx_error_destroy().
 *
 * With `--connect ADDRESS` (e.g. unix:/tmp/deepxd.sock) the same program runs against a deepx
 * daemon: dx_runtime_connect() instead of dx_runtime_create() and dx_runtime_load_plugin() is
 * the only difference (the daemon loads the plugins of its configuration). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deepx/host.h"

/* Prints the failed call with the error's code and message, and frees the error. */
static void report(const char* call, dx_error_t* error) {
  size_t length = 0;
  const char* message = dx_error_message(error, &length);
  fprintf(stderr, "%s failed: %s: %.*s\n", call, dx_status_string(dx_error_code(error)),
          (int)length, message);
  dx_error_destroy(error);
}

/* Runs a deepx call; on failure reports it and jumps to cleanup. */
#define CHECK(call)              \
  do {                           \
    dx_error_t* error_ = (call); \
    if (error_ != NULL) {        \
      report(#call, error_);     \
      goto cleanup;              \
    }                            \
  } while (0)

int main(int argc, char** argv) {
  int exit_code = EXIT_FAILURE;
  const char* address = NULL; /* --connect ADDRESS: run against deepxd there */
  dx_runtime_t* runtime = NULL;
  dx_tensor_t* a = NULL;
  dx_tensor_t* b = NULL;
  dx_tensor_t* sum = NULL;
  int32_t device = -1;
  dx_op_id_t add = 0;
  const int64_t shape[2] = {2, 3};
  const float a_values[6] = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  const float b_values[6] = {0.5f, -1.0f, 10.0f, 0.25f, 0.0f, -6.0f};
  float result[6];
  int i;

  if (argc == 3 && strcmp(argv[1], "--connect") == 0) {
    address = argv[2];
  } else if (argc != 1) {
    fprintf(stderr, "usage: %s [--connect ADDRESS]\n", argv[0]);
    return 2;
  }

  if (address != NULL) {
    CHECK(dx_runtime_connect(address, NULL, &runtime)); /* the one line that differs */
  } else {
    CHECK(dx_runtime_create(NULL, &runtime));
    CHECK(dx_runtime_load_plugin(runtime, "cpu", NULL));
  }
  CHECK(dx_runtime_find_device(runtime, "cpu", &device));

  CHECK(dx_tensor_create(runtime, device, DX_DTYPE_F32, shape, 2, &a));
  CHECK(dx_tensor_create(runtime, device, DX_DTYPE_F32, shape, 2, &b));
  CHECK(dx_tensor_create(runtime, device, DX_DTYPE_F32, shape, 2, &sum));
  CHECK(dx_tensor_write(a, a_values, sizeof a_values));
  CHECK(dx_tensor_write(b, b_values, sizeof b_values));

  /* An error is a value to look at: no plugin implements this op, so the lookup fails with
     DX_NOT_FOUND, which this program expects, reads and frees. */
  {
    dx_op_id_t missing = 0;
    dx_error_t* error = dx_runtime_op_lookup(runtime, "example.no_such_op", &missing);
    if (dx_error_code(error) != DX_NOT_FOUND) {
      fprintf(stderr, "looking up example.no_such_op: expected NOT_FOUND, got %s\n",
              dx_status_string(dx_error_code(error)));
      dx_error_destroy(error); /* a no-op for NULL */
      goto cleanup;
    }
    printf("looking up example.no_such_op: %s (%s)\n", dx_status_string(dx_error_code(error)),
           dx_error_message(error, NULL));
    dx_error_destroy(error);
  }

  /* Resolve the name once; the id is what a hot loop passes to dx_invoke(). */
  CHECK(dx_runtime_op_lookup(runtime, "dx.add", &add));
  {
    dx_tensor_t* inputs[2];
    inputs[0] = a;
    inputs[1] = b;
    CHECK(dx_invoke(runtime, add, inputs, 2, &sum, 1, NULL));
  }
  CHECK(dx_tensor_read(sum, result, sizeof result));

  printf("dx.add on the cpu plugin (op id %u%s%s), shape [2, 3]:\n", (unsigned)add,
         address != NULL ? ", in deepxd at " : "", address != NULL ? address : "");
  for (i = 0; i < 6; ++i) {
    printf("  %6.2f + %6.2f = %6.2f\n", a_values[i], b_values[i], result[i]);
    if (result[i] != a_values[i] + b_values[i]) {
      fprintf(stderr, "wrong result at element %d\n", i);
      goto cleanup;
    }
  }
  printf("OK\n");
  exit_code = EXIT_SUCCESS;

cleanup:
  /* Destroying NULL is a no-op; a failure to destroy is ignored by freeing its error. */
  dx_error_destroy(dx_tensor_destroy(sum));
  dx_error_destroy(dx_tensor_destroy(b));
  dx_error_destroy(dx_tensor_destroy(a));
  dx_error_destroy(dx_runtime_destroy(runtime));
  return exit_code;
}
