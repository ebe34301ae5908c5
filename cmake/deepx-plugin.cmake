# deepx_add_plugin(<target> NAME <name> SOURCES <src>... [OUTPUT_DIRECTORY <dir>])
#
# Builds an executor plugin as a MODULE library named libdeepx-plugin-<name>.so that exports
# only the entry symbol dx_plugin_entry (hidden visibility plus a version script). Used in tree
# and shipped in the installed CMake package, so vendors build plugins the same way.
#
# A plugin is a kernel library, so it is never built unoptimised by accident: when the consumer
# chose no build type (a single-config generator with CMAKE_BUILD_TYPE empty, where CMake adds
# no optimisation flag at all), its C and C++ sources get -O2, unless CMAKE_C_FLAGS or
# CMAKE_CXX_FLAGS already chooses an -O level. Any CMAKE_BUILD_TYPE (Debug included) is left as
# the consumer set it.
function(deepx_add_plugin target)
  cmake_parse_arguments(ARG "" "NAME;OUTPUT_DIRECTORY" "SOURCES" ${ARGN})
  if(NOT ARG_NAME)
    message(FATAL_ERROR "deepx_add_plugin(${target}): NAME is required")
  endif()
  add_library(${target} MODULE ${ARG_SOURCES})
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME "deepx-plugin-${ARG_NAME}"
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  if(ARG_OUTPUT_DIRECTORY)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIRECTORY}")
  endif()
  set(_vs "${CMAKE_CURRENT_BINARY_DIR}/${target}.map")
  file(WRITE "${_vs}" "{\n  global: dx_plugin_entry;\n  local: *;\n};\n")
  target_link_options(${target} PRIVATE "LINKER:--version-script=${_vs}" "LINKER:--no-undefined")
  target_link_libraries(${target} PRIVATE deepx::abi)
  get_property(_multi_config GLOBAL PROPERTY GENERATOR_IS_MULTI_CONFIG)
  if(NOT _multi_config AND NOT CMAKE_BUILD_TYPE)
    foreach(_lang C CXX)
      if(NOT " ${CMAKE_${_lang}_FLAGS}" MATCHES " -O")
        target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:${_lang}>:-O2>")
      endif()
    endforeach()
  endif()
endfunction()
