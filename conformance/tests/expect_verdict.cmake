# Runs a command and checks its exit status and that its output matches every given regex.
#   cmake "-DCOMMAND=a|b|c" -DEXPECT_EXIT=1 "-DEXPECT=re1|re2" -P expect_verdict.cmake
# ('|' separates list items so that the lists survive add_test(); items must not contain ';'.)
string(REPLACE "|" ";" COMMAND "${COMMAND}")
string(REPLACE "|" ";" EXPECT "${EXPECT}")
if(SETUP_DIR)  # a directory the command writes into
  file(MAKE_DIRECTORY "${SETUP_DIR}")
endif()
execute_process(COMMAND ${COMMAND} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}")
if(NOT "${rc}" STREQUAL "${EXPECT_EXIT}")
  message(FATAL_ERROR "exit status ${rc}, expected ${EXPECT_EXIT}\n${err}")
endif()
foreach(re IN LISTS EXPECT)
  if(NOT out MATCHES "${re}")
    message(FATAL_ERROR "output does not match '${re}'")
  endif()
endforeach()
