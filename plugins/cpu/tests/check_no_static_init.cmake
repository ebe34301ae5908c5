# Fails if any of OBJECTS (a |-separated list of object files) has a dynamic initializer.
# The CPU plugin's x86-64-v3/v4 kernel copies are linked into the same .so as the baseline one;
# a namespace-scope object with a constructor there would run its AVX2/AVX-512 code at dlopen on
# every CPU, before entry.cc could choose the baseline variant.
# Usage: cmake -DNM=<nm> -DOBJECTS=a.o|b.o -P check_no_static_init.cmake
string(REPLACE "|" ";" _objects "${OBJECTS}")
list(LENGTH _objects _count)
if(_count EQUAL 0)
  message(FATAL_ERROR "no objects given")
endif()
set(_bad "")
foreach(_o IN LISTS _objects)
  execute_process(COMMAND "${NM}" --defined-only "${_o}" OUTPUT_VARIABLE _symbols RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${NM} failed on ${_o}")
  endif()
  if(_symbols MATCHES "_GLOBAL__sub_I_")
    list(APPEND _bad "${_o}")
  endif()
endforeach()
if(_bad)
  string(REPLACE ";" "\n  " _list "${_bad}")
  message(FATAL_ERROR "dynamic initializers in instruction-set variant objects (they would run "
                      "on every CPU at dlopen):\n  ${_list}")
endif()
message(STATUS "${_count} variant objects, no dynamic initializers")
