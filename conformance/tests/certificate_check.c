/* Checks a certificate written by deepx-certify the way a client would see it:
 *   certificate_check PLUGIN CERTIFICATE_DIR CERTIFICATE_FILE [VERDICT [UNARY_F32_OP]]
 * loads PLUGIN into a runtime whose certificate path is CERTIFICATE_DIR (the host looks for
 * <dir>/<plugin name>.certificate), and requires that
 *   - the file starts with the exact header lines (deepx-certificate 2, plugin, sha256, suite),
 *     followed by `build`, `verdict`, `isa`, `cpu`, `library`, `tolerance_table_sha256`,
 *     `relaxed` and `kernel` lines only (at most one `build` line: deepx-certify writes the build
 *     id it certified), and ends with `signed-by` and `signature` (deepx-certify --sign),
 *   - its verdict line says VERDICT when given (CERTIFIED, CERTIFIED-with-relaxations), and
 *     there are `relaxed` lines exactly when the verdict is CERTIFIED-with-relaxations,
 *   - the host finds the certificate VALID for this binary (the signing key's public half is in
 *     DEEPX_TRUST_DIR),
 *   - every `kernel` line names a kernel of this plugin, and as many of the plugin's kernels are
 *     certified (dx_kernel_info_t.certified) as the file has kernel lines,
 *   - with UNARY_F32_OP (an op the certificate covers for f32 -> f32 on the CPU): trust-gated
 *     dispatch (DX_RUNTIME_FLAG_REQUIRE_CERTIFIED) runs it with this certificate and refuses it
 *     with DX_PERMISSION_DENIED without one. Memory comes from the reference plugin, loaded by
 *     name from DEEPX_PLUGIN_PATH.
 * Prints one line and exits 0 on success, 1 otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deepx/host.h"

static int fail(const char* what) {
  fprintf(stderr, "certificate_check: %s\n", what);
  return 1;
}

/* The result of a deepx call: 0 for a success (a null error); otherwise prints which call
 * failed (`what`), with the error's code and message, frees the error and returns 1. */
static int failed(dx_error_t* error, const char* what) {
  if (error == NULL) return 0;
  fprintf(stderr, "certificate_check: %s: %s: %s\n", what, dx_status_string(dx_error_code(error)),
          dx_error_message(error, NULL));
  dx_error_destroy(error);
  return 1;
}

/* Invokes `op` of the plugin at `path` on an f32 [4] tensor in a runtime that requires
 * certificates found in `certificate_dir`. Returns 0 with the invoke status in `*status`, or -1
 * when the setup failed. */
static int gated_invoke(const char* path, const char* certificate_dir, const char* op, dx_status_t* status) {
  dx_runtime_options_t options;
  memset(&options, 0, sizeof options);
  options.struct_size = DX_RUNTIME_OPTIONS_SIZE_1_0;
  /* Only this certificate directory counts: DEEPX_CERTIFICATE_PATH is ignored (and so is
     DEEPX_PLUGIN_PATH, passed explicitly instead). */
  options.flags = DX_RUNTIME_FLAG_REQUIRE_CERTIFIED | DX_RUNTIME_FLAG_IGNORE_ENV;
  options.plugin_path = getenv("DEEPX_PLUGIN_PATH");
  options.certificate_path = certificate_dir;
  dx_runtime_t* rt = NULL;
  if (failed(dx_runtime_create(&options, &rt), "dx_runtime_create (gated)")) return -1;
  int32_t index = -1, reference = -1, devices = 0, cpu = -1;
  int ok = !failed(dx_runtime_load_plugin(rt, path, &index), path) &&
           !failed(dx_runtime_load_plugin(rt, "reference", &reference), "reference") &&
           !failed(dx_runtime_device_count(rt, &devices), "dx_runtime_device_count");
  for (int32_t i = 0; ok && i < devices && cpu < 0; ++i) {
    dx_device_info_t di;
    memset(&di, 0, sizeof di);
    di.struct_size = DX_DEVICE_INFO_SIZE_1_0;
    if (!failed(dx_runtime_device_info(rt, i, &di), "dx_runtime_device_info") && di.device_type == kDLCPU) cpu = i;
  }
  if (ok && cpu < 0) {
    fprintf(stderr, "certificate_check: no CPU memory space\n");
    ok = 0;
  }
  const int64_t shape[1] = {4};
  const float ones[4] = {1, 1, 1, 1};
  dx_tensor_t *x = NULL, *y = NULL;
  ok = ok && !failed(dx_tensor_create(rt, cpu, DX_DTYPE_F32, shape, 1, &x), "dx_tensor_create") &&
       !failed(dx_tensor_create(rt, cpu, DX_DTYPE_F32, shape, 1, &y), "dx_tensor_create") &&
       !failed(dx_tensor_write(x, ones, sizeof ones), "dx_tensor_write");
  dx_op_id_t id = 0;
  ok = ok && !failed(dx_runtime_op_lookup(rt, op, &id), op);
  if (ok) {
    dx_invoke_options_t io;
    memset(&io, 0, sizeof io);
    io.struct_size = DX_INVOKE_OPTIONS_SIZE_1_0;
    io.flags = DX_INVOKE_FLAG_PLUGIN;
    io.plugin_index = index;
    dx_error_t* error = dx_invoke_ex(rt, id, &x, 1, &y, 1, NULL, &io);
    *status = dx_error_code(error);
    if (error != NULL) fprintf(stderr, "certificate_check: %s: %s\n", op, dx_error_message(error, NULL));
    dx_error_destroy(error);
  } else {
    fprintf(stderr, "certificate_check: setting up the gated runtime failed\n");
  }
  /* Nothing to do if these fail (destroying null is a no-op): ignore their errors. */
  dx_error_destroy(dx_tensor_destroy(x));
  dx_error_destroy(dx_tensor_destroy(y));
  dx_error_destroy(dx_runtime_destroy(rt));
  return ok ? 0 : -1;
}

/* Loads the plugin at `path` into `rt` and checks that the host finds its certificate valid and
 * certifies exactly `kernel_lines` of its kernels. Returns 0, or 1 after printing why not. The
 * caller destroys `rt` either way. */
static int check_certified(dx_runtime_t* rt, const char* path, int kernel_lines, const char* verdict,
                           int relaxed_lines) {
  int32_t index = -1;
  if (failed(dx_runtime_load_plugin(rt, path, &index), path)) return fail("cannot load the plugin");
  dx_plugin_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = DX_PLUGIN_INFO_SIZE_1_0;
  if (failed(dx_runtime_plugin_info(rt, index, &info), "dx_runtime_plugin_info")) return fail("cannot describe the plugin");
  if (info.certification != DX_CERTIFICATION_VALID) {
    fprintf(stderr, "certification %d: %s (%s)\n", info.certification, info.certification_note, info.certificate);
    return fail("the host does not accept the certificate");
  }
  int32_t ops = 0, certified = 0;
  if (failed(dx_runtime_op_count(rt, &ops), "dx_runtime_op_count")) return fail("cannot list the ops");
  for (int32_t op = 0; op < ops; ++op) {
    int32_t kernels = 0;
    if (failed(dx_runtime_kernel_count(rt, (dx_op_id_t)op, &kernels), "dx_runtime_kernel_count"))
      return fail("cannot list the kernels");
    for (int32_t k = 0; k < kernels; ++k) {
      dx_kernel_info_t ki;
      memset(&ki, 0, sizeof ki);
      ki.struct_size = DX_KERNEL_INFO_SIZE_1_0;
      if (failed(dx_runtime_kernel_info(rt, (dx_op_id_t)op, k, &ki), "dx_runtime_kernel_info"))
        return fail("cannot describe a kernel");
      if (ki.plugin_index == index && ki.certified) ++certified;
    }
  }
  /* info's strings are borrowed from the runtime: printed here, before the caller destroys it. */
  if (certified != kernel_lines) {
    fprintf(stderr, "%d kernel lines, %d kernels of the plugin certified by the host\n", kernel_lines, certified);
    return fail("the certificate names kernels the plugin does not have");
  }
  printf("certificate_check: VALID, %d kernels certified, verdict %s, %d relaxations (%s)\n", certified, verdict,
         relaxed_lines, info.certificate);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 4 || argc > 6)
    return fail("usage: certificate_check PLUGIN CERTIFICATE_DIR CERTIFICATE_FILE [VERDICT [UNARY_F32_OP]]");
  FILE* f = fopen(argv[3], "r");
  if (!f) return fail("cannot open the certificate file");
  char line[4096];
  char verdict[256] = "";
  int kernel_lines = 0, relaxed_lines = 0, build_lines = 0, number = 0;
  const char* headers[4] = {"deepx-certificate 2", "plugin ", "sha256 ", "suite "};
  int signed_by = 0, signature = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = 0;
    if (number < 4 && strncmp(line, headers[number], strlen(headers[number])) != 0) {
      fclose(f);
      fprintf(stderr, "line %d: '%s' should start with '%s'\n", number + 1, line, headers[number]);
      return fail("malformed header");
    }
    if (number >= 4) {
      char op[256];
      int device = 0;
      char dtypes[1024];
      if (strncmp(line, "build ", 6) == 0) {
        if (++build_lines > 1 || line[6] == 0) return fclose(f), fail("malformed or repeated build line");
      } else if (strncmp(line, "verdict ", 8) == 0) {
        snprintf(verdict, sizeof verdict, "%s", line + 8);
      } else if (strncmp(line, "relaxed ", 8) == 0) {
        ++relaxed_lines;
      } else if (signature) {
        return fclose(f), fail("a line after the signature");
      } else if (strncmp(line, "isa ", 4) == 0 || strncmp(line, "cpu ", 4) == 0 ||
                 strncmp(line, "library ", 8) == 0) {
        /* what else decides the numbers: recorded, checked by the host */
      } else if (strncmp(line, "signed-by ", 10) == 0) {
        if (++signed_by > 1 || strlen(line + 10) != 64) return fclose(f), fail("malformed or repeated signed-by line");
      } else if (strncmp(line, "signature ", 10) == 0) {
        if (!signed_by) return fclose(f), fail("a signature without a signed-by line");
        signature = 1;
      } else if (strncmp(line, "tolerance_table_sha256 ", 23) == 0) {
        if (strlen(line + 23) != 64) return fclose(f), fail("malformed tolerance_table_sha256 line");
      } else if (sscanf(line, "kernel %255s %d %1023s", op, &device, dtypes) == 3) {
        ++kernel_lines;
      } else {
        fclose(f);
        fprintf(stderr, "line %d: '%s'\n", number + 1, line);
        return fail("malformed line (expected build, verdict, isa, cpu, library, tolerance_table_sha256, relaxed, "
                    "kernel, signed-by or signature)");
      }
    }
    ++number;
  }
  fclose(f);
  if (kernel_lines == 0) return fail("no kernel lines");
  if (!signature) return fail("not signed (deepx-certify --sign KEY): a host would grant it nothing");
  if (verdict[0] == 0) return fail("no verdict line");
  if (argc >= 5 && strcmp(verdict, argv[4]) != 0) {
    fprintf(stderr, "verdict '%s', expected '%s'\n", verdict, argv[4]);
    return fail("wrong verdict");
  }
  if ((relaxed_lines > 0) != (strcmp(verdict, "CERTIFIED-with-relaxations") == 0))
    return fail("relaxed lines and the verdict disagree");

  dx_runtime_options_t options;
  memset(&options, 0, sizeof options);
  options.struct_size = DX_RUNTIME_OPTIONS_SIZE_1_0;
  options.certificate_path = argv[2];
  dx_runtime_t* rt = NULL;
  if (failed(dx_runtime_create(&options, &rt), "dx_runtime_create")) return fail("cannot create a runtime");
  const int result = check_certified(rt, argv[1], kernel_lines, verdict, relaxed_lines);
  dx_error_destroy(dx_runtime_destroy(rt)); /* on every path, refusals included */
  if (result != 0) return result;

  if (argc == 6) {
    dx_status_t with = DX_OK, without = DX_OK;
    if (gated_invoke(argv[1], argv[2], argv[5], &with) != 0) return fail("cannot run the gated invocation");
    if (with != DX_OK) return fail("trust-gated dispatch refused a kernel its certificate covers");
    if (gated_invoke(argv[1], "/nonexistent-deepx-certificate-dir", argv[5], &without) != 0)
      return fail("cannot run the gated invocation");
    if (without != DX_PERMISSION_DENIED) {
      fprintf(stderr, "without a certificate: %s\n", dx_status_string(without));
      return fail("trust-gated dispatch ran a kernel without a certificate");
    }
    printf("certificate_check: trust-gated dispatch runs %s with the certificate (%s) and refuses it without one\n",
           argv[5], verdict);
  }
  return 0;
}
