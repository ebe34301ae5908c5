# Configures, builds and tests abi/ and host/ (DEEPX_HOST_ONLY) with AddressSanitizer and
# UndefinedBehaviorSanitizer, in BINARY_DIR. Run by the CTest host_asan_ubsan; fails on any
# build error, test failure, sanitizer report or leak.
set(_san "-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined")
set(_configure
  "${CMAKE_COMMAND}" -S "${SOURCE_DIR}" -B "${BINARY_DIR}" -G Ninja
  -DCMAKE_BUILD_TYPE=Debug -DDEEPX_HOST_ONLY=ON
  -DDEEPX_BUILD_BENCHMARKS=OFF -DDEEPX_BUILD_EXAMPLES=OFF -DDEEPX_BUILD_DOCS=OFF
  "-DCMAKE_C_COMPILER=${C_COMPILER}" "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}"
  "-DCMAKE_C_FLAGS=${_san}" "-DCMAKE_CXX_FLAGS=${_san}"
  "-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined"
  "-DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=address,undefined"
  "-DCMAKE_MODULE_LINKER_FLAGS=-fsanitize=address,undefined")
if(LAUNCHER)
  list(APPEND _configure "-DCMAKE_C_COMPILER_LAUNCHER=${LAUNCHER}"
                         "-DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER}")
endif()
execute_process(COMMAND ${_configure} RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring the sanitizer build of the host failed (${rc})")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BINARY_DIR}" -j 2 RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building the host with ASan+UBSan failed (${rc})")
endif()
# Valgrind cannot run ASan binaries, and the ABI baseline needs an uninstrumented build: both
# run in the ordinary build.
execute_process(
  COMMAND "${CMAKE_COMMAND}" -E env
          "ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=1"
          "UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1"
          "${CMAKE_CTEST_COMMAND}" --test-dir "${BINARY_DIR}" -j 2 --output-on-failure
          --timeout 600 -E "^(abi_baseline|host_abi_contract_no_leaks)$"
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the host's tests failed under ASan+UBSan (${rc}); see above")
endif()
message(STATUS "the host and its tests are clean under ASan+UBSan")
