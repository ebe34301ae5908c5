# host_remote_test (remote_test.cc): the remote runtime (dx_runtime_connect) against a real deepxd
# started by each test on a temporary socket with the CPU plugin; CTest label `daemon`. Included
# by host/CMakeLists.txt in a full build (the host-only and fuzz builds have no deepxd).
add_executable(host_remote_test "${CMAKE_CURRENT_LIST_DIR}/remote_test.cc")
target_link_libraries(host_remote_test PRIVATE deepx::host deepx_wire GTest::gtest
  GTest::gtest_main Threads::Threads)
target_include_directories(host_remote_test PRIVATE "${CMAKE_CURRENT_LIST_DIR}")
target_compile_options(host_remote_test PRIVATE -Wall -Wextra)
target_compile_definitions(host_remote_test PRIVATE
  CPU_PLUGIN="$<TARGET_FILE:deepx_plugin_cpu>"
  DEEPXD="${CMAKE_RUNTIME_OUTPUT_DIRECTORY}/deepxd")
gtest_discover_tests(host_remote_test PROPERTIES LABELS daemon TIMEOUT 120 DISCOVERY_TIMEOUT 60)

# deepxd and the CPU plugin are configured after host/: the dependencies are added once the whole
# tree is read.
function(deepx_host_remote_test_dependencies)
  add_dependencies(host_remote_test deepx_plugin_cpu)
  if(TARGET deepxd)
    add_dependencies(host_remote_test deepxd)
  else()
    message(STATUS "host_remote_test: no deepxd target; its tests fail until daemon/deepxd builds")
  endif()
endfunction()
cmake_language(DEFER DIRECTORY "${PROJECT_SOURCE_DIR}" CALL deepx_host_remote_test_dependencies)
