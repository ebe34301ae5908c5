// <immintrin.h> for the CPU plugin's intrinsic paths, included once here so that every kernel
// file gets the same warning set-up. GCC 12 flags the intrinsics' deliberately undefined
// pass-through operands (_mm512_undefined_ps and friends) once they are inlined: those
// -Wuninitialized / -Wmaybe-uninitialized reports are false positives. Whether a diagnostic
// fires is decided where the inline function is first seen, so this header must be the first to
// include <immintrin.h> in a translation unit: include it before any other header that might.
// Every use of an intrinsic stays under its own feature guard (__AVX512F__, __AVX2__, __F16C__),
// because the same sources also build for baseline x86-64.
#ifndef DEEPX_PLUGINS_CPU_SIMD_H_
#define DEEPX_PLUGINS_CPU_SIMD_H_

#if defined(__SSE2__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

#endif  // DEEPX_PLUGINS_CPU_SIMD_H_
