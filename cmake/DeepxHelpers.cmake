# Helpers shared by the in-tree build.
include("${CMAKE_CURRENT_LIST_DIR}/deepx-plugin.cmake")

# deepx_add_gtest(<target> SOURCES <src>... [LIBS <lib>...] [LABELS <label>...])
function(deepx_add_gtest target)
  cmake_parse_arguments(ARG "" "" "SOURCES;LIBS;LABELS" ${ARGN})
  add_executable(${target} ${ARG_SOURCES})
  target_link_libraries(${target} PRIVATE GTest::gtest GTest::gtest_main ${ARG_LIBS})
  set(_labels unit)
  if(ARG_LABELS)
    set(_labels ${ARG_LABELS})
  endif()
  gtest_discover_tests(${target} PROPERTIES LABELS "${_labels}" DISCOVERY_TIMEOUT 60)
endfunction()
