# Runs one fuzzer for a bounded time, as the CTest tests fuzz_<target> do (README.md):
#
#   cmake -DFUZZER=<fuzzer> -DCORPUS=<seed dir> -DWORK_DIR=<dir> [-DSECONDS=30]
#         [-DRSS_MB=2048] [-DUNIT_TIMEOUT=25] -P run_fuzzer.cmake
#
# The seed corpus is copied to WORK_DIR/corpus first (the fuzzer adds what it finds there, never
# in the source tree); crashes, leaks, timeouts and sanitizer reports land in WORK_DIR/artifacts/
# and fail the run.
foreach(_var FUZZER CORPUS WORK_DIR)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "run_fuzzer.cmake: -D${_var}=... is required")
  endif()
endforeach()
if(NOT DEFINED SECONDS)
  set(SECONDS 30)
endif()
if(NOT DEFINED RSS_MB)
  set(RSS_MB 2048)
endif()
if(NOT DEFINED UNIT_TIMEOUT)
  set(UNIT_TIMEOUT 25)
endif()
if(NOT EXISTS "${FUZZER}")
  message(FATAL_ERROR "run_fuzzer.cmake: ${FUZZER} does not exist (is the fuzz build built?)")
endif()

file(REMOVE_RECURSE "${WORK_DIR}/corpus" "${WORK_DIR}/artifacts")
file(MAKE_DIRECTORY "${WORK_DIR}/corpus" "${WORK_DIR}/artifacts")
if(IS_DIRECTORY "${CORPUS}")
  file(GLOB _seeds LIST_DIRECTORIES false "${CORPUS}/*")
  if(_seeds)
    file(COPY ${_seeds} DESTINATION "${WORK_DIR}/corpus")
  endif()
endif()

# Leaks fail the run; UBSan already aborts (-fno-sanitize-recover); keep what the caller set.
if(NOT DEFINED ENV{ASAN_OPTIONS})
  set(ENV{ASAN_OPTIONS} "detect_leaks=1:allocator_may_return_null=1")
endif()
if(NOT DEFINED ENV{UBSAN_OPTIONS})
  set(ENV{UBSAN_OPTIONS} "print_stacktrace=1:halt_on_error=1")
endif()

execute_process(
  COMMAND "${FUZZER}" "-max_total_time=${SECONDS}" "-rss_limit_mb=${RSS_MB}"
          "-timeout=${UNIT_TIMEOUT}" "-print_final_stats=1"
          "-artifact_prefix=${WORK_DIR}/artifacts/" "${WORK_DIR}/corpus"
  WORKING_DIRECTORY "${WORK_DIR}"
  RESULT_VARIABLE _rc
  OUTPUT_VARIABLE _out
  ERROR_VARIABLE _out)
file(WRITE "${WORK_DIR}/last-run.log" "${_out}")

if(_out MATCHES "DEEPX_FUZZ_SKIPPED[^\n]*")
  message("${CMAKE_MATCH_0}")
  return()
endif()

get_filename_component(_name "${FUZZER}" NAME)
string(REGEX MATCHALL "stat::[a-z_]+: *[0-9]+" _stats "${_out}")
string(REGEX MATCH "#[0-9]+[ \t]+DONE[^\n]*" _done "${_out}")
file(GLOB _artifacts "${WORK_DIR}/artifacts/*")
set(_failed OFF)
if(NOT _rc EQUAL 0 OR _artifacts OR
   _out MATCHES "ERROR: (Address|Leak|UndefinedBehavior)Sanitizer|runtime error:|deepx fuzz check failed")
  set(_failed ON)
endif()
if(_failed)
  # The end of the log holds the report and the path of the saved input.
  string(LENGTH "${_out}" _len)
  set(_start 0)
  if(_len GREATER 20000)
    math(EXPR _start "${_len} - 20000")
  endif()
  string(SUBSTRING "${_out}" ${_start} -1 _tail)
  message("${_tail}")
  string(REGEX MATCH "INFO: Seed: [0-9]+" _seed "${_out}")
  message(FATAL_ERROR "${_name} failed (exit ${_rc}; ${_seed}); the input is in "
    "${WORK_DIR}/artifacts/ (reproduce: ${FUZZER} <file>); full log: ${WORK_DIR}/last-run.log")
endif()
string(REPLACE ";" "\n  " _stats "${_stats}")
message("${_name}: no crash in ${SECONDS} s: ${_done}\n  ${_stats}")
