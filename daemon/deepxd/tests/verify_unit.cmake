# The CTest deepxd_unit_verify: `systemd-analyze verify` of deepxd.service, on a staged copy
# whose ExecStart names the built deepxd (the installed /usr/bin/deepxd does not exist here).
# Fails on a non-zero exit or on any message (an unknown key or a bad value is only a warning
# for systemd). Then checks that docs/operations.md (-DDOC=) shows the unit as it is: every
# line of the file is a line of the page. Arguments: -DUNIT= -DDEEPXD= -DOUT= -DDOC=
# -DANALYZE= (empty: the verify step is skipped).
cmake_policy(SET CMP0057 NEW)  # if(... IN_LIST ...)
file(STRINGS "${UNIT}" unit_lines)
file(STRINGS "${DOC}" doc_lines)
foreach(line IN LISTS unit_lines)
  if(NOT line STREQUAL "" AND NOT line IN_LIST doc_lines)
    message(FATAL_ERROR "${DOC} does not show this line of ${UNIT}:\n${line}")
  endif()
endforeach()
if(NOT ANALYZE)
  message("DEEPX_SKIP: systemd-analyze not found (Debian package systemd)")
  return()
endif()
file(READ "${UNIT}" text)
string(FIND "${text}" "ExecStart=/usr/bin/deepxd " at)
if(at LESS 0)
  message(FATAL_ERROR "${UNIT}: no 'ExecStart=/usr/bin/deepxd ' line to stage")
endif()
string(REPLACE "ExecStart=/usr/bin/deepxd " "ExecStart=${DEEPXD} " text "${text}")
file(MAKE_DIRECTORY "${OUT}")
file(WRITE "${OUT}/deepxd.service" "${text}")
execute_process(COMMAND "${ANALYZE}" verify "${OUT}/deepxd.service"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT "${out}${err}" STREQUAL "")
  message(FATAL_ERROR "systemd-analyze verify: exit ${rc}\n${out}${err}")
endif()
message("systemd-analyze verify: ${OUT}/deepxd.service is clean")
