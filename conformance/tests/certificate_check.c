/* Checks a certificate written by deepx-certify the way a client would see it:
 *   certificate_check PLUGIN CERTIFICATE_DIR CERTIFICATE_FILE
 * loads PLUGIN into a runtime whose certificate path is CERTIFICATE_DIR (the host looks for
 * <dir>/<plugin name>.certificate), and requires that
 *   - the file starts with the exact header lines (deepx-certificate 1, plugin, sha256, suite),
 *   - the host finds the certificate VALID for this binary,
 *   - every `kernel` line names a kernel of this plugin, and as many of the plugin's kernels are
 *     certified (dx_kernel_info_t.certified) as the file has kernel lines.
 * Prints one line and exits 0 on success, 1 otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deepx/host.h"

static int fail(const char* what) {
  fprintf(stderr, "certificate_check: %s\n", what);
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 4) return fail("usage: certificate_check PLUGIN CERTIFICATE_DIR CERTIFICATE_FILE");
  FILE* f = fopen(argv[3], "r");
  if (!f) return fail("cannot open the certificate file");
  char line[4096];
  int kernel_lines = 0, number = 0;
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
      if (sscanf(line, "kernel %255s %d %1023s", op, &device, dtypes) != 3) {
        fclose(f);
        fprintf(stderr, "line %d: '%s'\n", number + 1, line);
        return fail("malformed kernel line");
      }
      ++kernel_lines;
    }
    ++number;
  }
  fclose(f);
  if (kernel_lines == 0) return fail("no kernel lines");

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
  if (ok) printf("certificate_check: VALID, %d kernels certified (%s)\n", certified, info.certificate);
  else fprintf(stderr, "%d kernel lines, %d kernels of the plugin certified by the host\n", kernel_lines, certified);
  dx_runtime_destroy(rt);
  return ok ? 0 : fail("the certificate names kernels the plugin does not have");
}
