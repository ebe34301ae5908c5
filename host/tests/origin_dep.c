/* Fixture of the certificate tests: a vendor library the plugin "origin" finds through
 * RUNPATH $ORIGIN (in its own directory). */
#include "deepx/plugin.h"

DX_EXPORT int deepx_origin_dep_answer(void) { return 42; }
