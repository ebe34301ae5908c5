/* Checks a certificate written by deepx-certify the way a client would see it:
 *   certificate_check PLUGIN CERTIFICATE_DIR CERTIFICATE_FILE [VERDICT [UNARY_F32_OP]]
 * loads PLUGIN into a runtime whose certificate path is CERTIFICATE_DIR (the host looks for
 * <dir>/<plugin name>.certificate), and requires that
 *   - the file starts with the exact header lines (deepx-certificate 1, plugin, sha256, suite),
 *     followed by `build`, `verdict`, `tolerance_table_sha256`, `relaxed` and `kernel` lines only
 *     (at most one `build` line: deepx-certify writes the build id it certified),
 *   - its verdict line says VERDICT when given (CERTIFIED, CERTIFIED-with-relaxations), and
 *     there are `relaxed` lines exactly when the verdict is CERTIFIED-with-relaxations,
 *   - the host finds the certificate VALID for this binary,
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

/* Invokes `op` of the plugin at `path` on an f32 [4] tensor in a runtime that requires
 * certificates found in `certificate_dir`. Returns the invoke status (or a setup failure as -1). */
static int gated_invoke(const char* path, const char* certificate_dir, const char* op, dx_status_t* status) {
  dx_runtime_options_t options;
  memset(&options, 0, sizeof options);
  options.struct_size = DX_STRUCT_SIZE(dx_runtime_options_t, certificate_path);
  /* Only this certificate directory counts: DEEPX_CERTIFICATE_PATH is ignored (and so is
     DEEPX_PLUGIN_PATH, passed explicitly instead). */
  options.flags = DX_RUNTIME_FLAG_REQUIRE_CERTIFIED | DX_RUNTIME_FLAG_IGNORE_ENV;
  options.plugin_path = getenv("DEEPX_PLUGIN_PATH");
  options.certificate_path = certificate_dir;
  dx_runtime_t* rt = NULL;
  if (dx_runtime_create(&options, &rt) != DX_OK) return -1;
  int32_t index = -1, reference = -1, devices = 0, cpu = -1;
  int ok = dx_runtime_load_plugin(rt, path, &index) == DX_OK && dx_runtime_load_plugin(rt, "reference", &reference) == DX_OK &&
           dx_runtime_device_count(rt, &devices) == DX_OK;
  for (int32_t i = 0; ok && i < devices && cpu < 0; ++i) {
    dx_device_info_t di;
    memset(&di, 0, sizeof di);
    di.struct_size = DX_STRUCT_SIZE(dx_device_info_t, alignment);
    if (dx_runtime_device_info(rt, i, &di) == DX_OK && di.device_type == kDLCPU) cpu = i;
  }
  const int64_t shape[1] = {4};
  const float ones[4] = {1, 1, 1, 1};
  dx_tensor_t *x = NULL, *y = NULL;
  ok = ok && cpu >= 0 && dx_tensor_create(rt, cpu, DX_DTYPE_F32, shape, 1, &x) == DX_OK &&
       dx_tensor_create(rt, cpu, DX_DTYPE_F32, shape, 1, &y) == DX_OK && dx_tensor_write(x, ones, sizeof ones) == DX_OK;
  dx_op_id_t id = 0;
  ok = ok && dx_runtime_op_lookup(rt, op, &id) == DX_OK;
  if (ok) {
    dx_invoke_options_t io;
    memset(&io, 0, sizeof io);
    io.struct_size = DX_STRUCT_SIZE(dx_invoke_options_t, plugin_index);
    io.flags = DX_INVOKE_FLAG_PLUGIN;
    io.plugin_index = index;
    *status = dx_invoke_ex(rt, id, &x, 1, &y, 1, NULL, &io);
    if (*status != DX_OK) fprintf(stderr, "certificate_check: %s: %s\n", op, dx_last_error_message());
  } else {
    fprintf(stderr, "certificate_check: setting up the gated runtime failed: %s\n", dx_last_error_message());
  }
  dx_tensor_destroy(x);
  dx_tensor_destroy(y);
  dx_runtime_destroy(rt);
  return ok ? 0 : -1;
}

int main(int argc, char** argv) {
  if (argc < 4 || argc > 6)
    return fail("usage: certificate_check PLUGIN CERTIFICATE_DIR CERTIFICATE_FILE [VERDICT [UNARY_F32_OP]]");
  FILE* f = fopen(argv[3], "r");
  if (!f) return fail("cannot open the certificate file");
  char line[4096];
  char verdict[256] = "";
  int kernel_lines = 0, relaxed_lines = 0, build_lines = 0, number = 0;
  const char* headers[4] = {"deepx-certificate 1", "plugin ", "sha256 ", "suite "};
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
      } else if (strncmp(line, "tolerance_table_sha256 ", 23) == 0) {
        if (strlen(line + 23) != 64) return fclose(f), fail("malformed tolerance_table_sha256 line");
      } else if (sscanf(line, "kernel %255s %d %1023s", op, &device, dtypes) == 3) {
        ++kernel_lines;
      } else {
        fclose(f);
        fprintf(stderr, "line %d: '%s'\n", number + 1, line);
        return fail("malformed line (expected build, verdict, tolerance_table_sha256, relaxed or kernel)");
      }
    }
    ++number;
  }
  fclose(f);
  if (kernel_lines == 0) return fail("no kernel lines");
  if (verdict[0] == 0) return fail("no verdict line");
  if (argc >= 5 && strcmp(verdict, argv[4]) != 0) {
    fprintf(stderr, "verdict '%s', expected '%s'\n", verdict, argv[4]);
    return fail("wrong verdict");
  }
  if ((relaxed_lines > 0) != (strcmp(verdict, "CERTIFIED-with-relaxations") == 0))
    return fail("relaxed lines and the verdict disagree");

  dx_runtime_options_t options;
  memset(&options, 0, sizeof options);
  options.struct_size = DX_STRUCT_SIZE(dx_runtime_options_t, certificate_path);
  options.certificate_path = argv[2];
  dx_runtime_t* rt = NULL;
  if (dx_runtime_create(&options, &rt) != DX_OK) return fail(dx_last_error_message());
  int32_t index = -1;
  if (dx_runtime_load_plugin(rt, argv[1], &index) != DX_OK) return fail(dx_last_error_message());
  dx_plugin_info_t info;
  memset(&info, 0, sizeof info);
  info.struct_size = DX_STRUCT_SIZE(dx_plugin_info_t, certification_note);
  if (dx_runtime_plugin_info(rt, index, &info) != DX_OK) return fail(dx_last_error_message());
  if (info.certification != DX_CERTIFICATION_VALID) {
    fprintf(stderr, "certification %d: %s (%s)\n", info.certification, info.certification_note, info.certificate);
    return fail("the host does not accept the certificate");
  }
  int32_t ops = 0, certified = 0;
  dx_runtime_op_count(rt, &ops);
  for (int32_t op = 0; op < ops; ++op) {
    int32_t kernels = 0;
    dx_runtime_kernel_count(rt, (dx_op_id_t)op, &kernels);
    for (int32_t k = 0; k < kernels; ++k) {
      dx_kernel_info_t ki;
      memset(&ki, 0, sizeof ki);
      ki.struct_size = DX_STRUCT_SIZE(dx_kernel_info_t, certified);
      if (dx_runtime_kernel_info(rt, (dx_op_id_t)op, k, &ki) == DX_OK && ki.plugin_index == index && ki.certified)
        ++certified;
    }
  }
  /* info's strings are borrowed from the runtime: print before destroying it. */
  const int ok = certified == kernel_lines;
  if (ok)
    printf("certificate_check: VALID, %d kernels certified, verdict %s, %d relaxations (%s)\n", certified, verdict,
           relaxed_lines, info.certificate);
  else
    fprintf(stderr, "%d kernel lines, %d kernels of the plugin certified by the host\n", kernel_lines, certified);
  dx_runtime_destroy(rt);
  if (!ok) return fail("the certificate names kernels the plugin does not have");

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
