# Runs abi_describe and compares its output with the checked-in abi/deepx-abi.json.
execute_process(COMMAND "${DESCRIBE}" OUTPUT_VARIABLE actual RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "abi_describe failed (${rc})")
endif()
file(READ "${EXPECTED}" expected)
if(NOT actual STREQUAL expected)
  file(WRITE "${CMAKE_CURRENT_BINARY_DIR}/deepx-abi.actual.json" "${actual}")
  message(FATAL_ERROR
    "abi/deepx-abi.json does not match the headers (what they say now is in "
    "${CMAKE_CURRENT_BINARY_DIR}/deepx-abi.actual.json). If the header change is intended, "
    "run `cmake --build build/default --target abi-description-update` and commit the JSON "
    "with it (docs/versioning.md says how a minor is recorded).")
endif()
message(STATUS "abi/deepx-abi.json matches the headers")
