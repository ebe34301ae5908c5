# The CTest deepxd_unit_verify: `systemd-analyze verify` of deepxd.service, on a staged copy
# whose ExecStart names the built deepxd (the installed /usr/bin/deepxd does not exist here).
# Fails on a non-zero exit or on any message (an unknown key or a bad value is only a warning
# for systemd). Arguments: -DUNIT= -DDEEPXD= -DOUT= -DANALYZE= (empty: the test is skipped).
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
