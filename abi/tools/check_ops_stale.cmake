# Proves that ops_table_current fails when it should: copies abi/ops.json and the four files
# generated from it into WORK_DIR, then runs `gen_ops.py --check` on
#   1. the copies as they are: must pass;
#   2. a hand edit of a generated file (host/src/op_table.inc): must fail and name that file only;
#   3. an ops.json change not regenerated (dx.relu without a backward): must fail and name the
#      conformance table and docs/ops.md, the files that show the backward column;
#   4. an ops.json naming a shape rule that is not in the closed set: must be refused with the
#      op's name.
# Arguments: -DPYTHON3= -DGENERATOR= (cmake/gen_ops.py) -DSOURCE_DIR= (the repository) -DWORK_DIR=
set(_files abi/ops.json abi/include/deepx/ops.h host/src/op_table.inc conformance/src/op_table.hpp
           docs/ops.md)

function(_copy_tree)
  file(REMOVE_RECURSE "${WORK_DIR}")
  foreach(_f IN LISTS _files)
    get_filename_component(_dir "${WORK_DIR}/${_f}" DIRECTORY)
    file(MAKE_DIRECTORY "${_dir}")
    file(COPY_FILE "${SOURCE_DIR}/${_f}" "${WORK_DIR}/${_f}")
  endforeach()
endfunction()

# _check(<expected exit code> <regex the output must match> <regex it must not match or "">)
function(_check want match reject)
  execute_process(COMMAND "${PYTHON3}" "${GENERATOR}" --check "${WORK_DIR}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(all "${out}${err}")
  if(NOT rc EQUAL want)
    message(FATAL_ERROR "gen_ops.py --check exited ${rc}, expected ${want}:\n${all}")
  endif()
  if(NOT all MATCHES "${match}")
    message(FATAL_ERROR "gen_ops.py --check did not say '${match}':\n${all}")
  endif()
  if(reject AND all MATCHES "${reject}")
    message(FATAL_ERROR "gen_ops.py --check said '${reject}', which it should not:\n${all}")
  endif()
endfunction()

# 1. An untouched copy is current.
_copy_tree()
_check(0 "are current" "")

# 2. A hand edit of a generated file.
file(APPEND "${WORK_DIR}/host/src/op_table.inc" "// a hand edit\n")
_check(1 "stale files \\(not what abi/ops.json says\\): host/src/op_table.inc\n"
       "abi/include/deepx/ops.h|conformance/src/op_table.hpp|docs/ops.md")

# 3. The source changed, the generated files not.
_copy_tree()
file(READ "${WORK_DIR}/abi/ops.json" _json)
string(FIND "${_json}" "\"name\": \"dx.relu\"" _at)
string(SUBSTRING "${_json}" 0 ${_at} _head)
string(SUBSTRING "${_json}" ${_at} -1 _tail)
string(FIND "${_tail}" "\"backward\": true" _flag)  # dx.relu's own, the first after its name
if(_at LESS 0 OR _flag LESS 0)
  message(FATAL_ERROR "could not find dx.relu's backward in the copy of abi/ops.json")
endif()
string(SUBSTRING "${_tail}" 0 ${_flag} _before)
math(EXPR _after_at "${_flag} + 16")
string(SUBSTRING "${_tail}" ${_after_at} -1 _after)
set(_tail "${_before}\"backward\": false${_after}")
file(WRITE "${WORK_DIR}/abi/ops.json" "${_head}${_tail}")
_check(1 "stale files \\(not what abi/ops.json says\\): conformance/src/op_table.hpp docs/ops.md\n"
       "host/src/op_table.inc|abi/include/deepx/ops.h ")

# 4. A shape rule outside the closed set.
_copy_tree()
file(READ "${WORK_DIR}/abi/ops.json" _json)
string(REPLACE "\"shape_rule\": \"tile\"" "\"shape_rule\": \"tiles\"" _json "${_json}")
file(WRITE "${WORK_DIR}/abi/ops.json" "${_json}")
_check(2 "dx.tile\\): shape_rule 'tiles' is not in shape_rules" "")

file(REMOVE_RECURSE "${WORK_DIR}")
message(STATUS "gen_ops.py --check passes a current tree and names every stale or invalid file")
