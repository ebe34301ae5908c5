# Install-time script: splits one built binary's debug info from what is installed. Run by
# `cmake --install` and `cpack` through the install(CODE) rules of packaging/CMakeLists.txt
# (never at build time: the build tree keeps its binaries whole, tests and certificates use
# those). Input variables:
#   DEEPX_SPLIT_BUILT        the binary in the build tree
#   DEEPX_SPLIT_DESTINATION  its install directory, relative to the install prefix
#   DEEPX_SPLIT_ACTION       strip: strip the installed copy (--strip-unneeded) and, when the
#                                   binary has debug info, add a .gnu_debuglink to its .debug file
#                            debug: install <DESTINATION>/.debug/<file>.debug (where gdb looks
#                                   for a debug link, whatever the prefix)
#   DEEPX_SPLIT_CACHE        build-tree directory that keeps the .debug files, so that both
#                            actions (run for different components) use the same file
#   DEEPX_OBJCOPY, DEEPX_READELF  the binutils of the build
foreach(_var DEEPX_SPLIT_BUILT DEEPX_SPLIT_DESTINATION DEEPX_SPLIT_ACTION DEEPX_SPLIT_CACHE
             DEEPX_OBJCOPY DEEPX_READELF)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "split-debug.cmake: ${_var} is not set")
  endif()
endforeach()
if(NOT EXISTS "${DEEPX_SPLIT_BUILT}")
  message(FATAL_ERROR "split-debug.cmake: ${DEEPX_SPLIT_BUILT} is not built; run `make build` "
                      "(or `cmake --build`) before installing")
endif()

get_filename_component(_name "${DEEPX_SPLIT_BUILT}" NAME)
set(_debug_file "${DEEPX_SPLIT_CACHE}/${_name}.debug")

# The .debug file in the build tree, (re)made when the binary is newer; empty when the binary
# carries no debug info (a Release build without -g: nothing to split).
execute_process(COMMAND "${DEEPX_READELF}" -S --wide "${DEEPX_SPLIT_BUILT}"
                OUTPUT_VARIABLE _sections RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "split-debug.cmake: ${DEEPX_READELF} cannot read ${DEEPX_SPLIT_BUILT}")
endif()
if(_sections MATCHES "[ \t]\\.debug_info[ \t]")
  if(NOT EXISTS "${_debug_file}" OR "${DEEPX_SPLIT_BUILT}" IS_NEWER_THAN "${_debug_file}")
    # Two installs may run at once (CTest -j); each writes its own temporary file and renames
    # it into place. objcopy's output is the same for the same input, so either one may win.
    file(MAKE_DIRECTORY "${DEEPX_SPLIT_CACHE}")
    string(RANDOM LENGTH 12 _tag)
    set(_tmp "${_debug_file}.${_tag}.tmp")
    execute_process(COMMAND "${DEEPX_OBJCOPY}" --only-keep-debug --compress-debug-sections=zlib
                            "${DEEPX_SPLIT_BUILT}" "${_tmp}"
                    RESULT_VARIABLE _rc)
    if(NOT _rc EQUAL 0)
      file(REMOVE "${_tmp}")
      message(FATAL_ERROR "split-debug.cmake: objcopy --only-keep-debug failed on ${DEEPX_SPLIT_BUILT}")
    endif()
    file(RENAME "${_tmp}" "${_debug_file}")
  endif()
else()
  file(REMOVE "${_debug_file}")
  set(_debug_file "")
endif()

if(DEEPX_SPLIT_ACTION STREQUAL "strip")
  set(_installed "$ENV{DESTDIR}${CMAKE_INSTALL_PREFIX}/${DEEPX_SPLIT_DESTINATION}/${_name}")
  if(NOT EXISTS "${_installed}")
    message(FATAL_ERROR "split-debug.cmake: ${_installed} was not installed")
  endif()
  set(_link "")
  if(_debug_file)
    set(_link "--add-gnu-debuglink=${_debug_file}")
  endif()
  # A copy left from an earlier install (one that cmake found up to date) already carries the
  # link; stripping it again changes nothing, and objcopy refuses a second link.
  execute_process(COMMAND "${DEEPX_READELF}" -S --wide "${_installed}" OUTPUT_VARIABLE _installed_sections)
  if(_installed_sections MATCHES "\\.gnu_debuglink")
    set(_link "")
  endif()
  execute_process(COMMAND "${DEEPX_OBJCOPY}" --strip-unneeded --remove-section=.comment ${_link}
                          "${_installed}" RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "split-debug.cmake: objcopy --strip-unneeded failed on ${_installed}")
  endif()
  message(STATUS "Stripped: ${_installed}")
elseif(DEEPX_SPLIT_ACTION STREQUAL "debug")
  if(_debug_file)
    file(INSTALL DESTINATION "${CMAKE_INSTALL_PREFIX}/${DEEPX_SPLIT_DESTINATION}/.debug"
         TYPE FILE FILES "${_debug_file}")
  endif()
else()
  message(FATAL_ERROR "split-debug.cmake: DEEPX_SPLIT_ACTION is '${DEEPX_SPLIT_ACTION}' (strip or debug)")
endif()
