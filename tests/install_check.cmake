# `cmake --install` into a fresh prefix gives a `troupe` that runs from there: its libraries are
# found beside it (RPATH $ORIGIN/../lib), the bundled data and the licence are installed.
# cmake -DBUILD=<build dir> -DPREFIX=<empty dir> -P install_check.cmake
file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD} --prefix ${PREFIX} RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
execute_process(COMMAND ${PREFIX}/bin/troupe --version RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "^troupe [0-9]+\\.[0-9]+\\.[0-9]+ \\(commit ")
  message(FATAL_ERROR "installed troupe --version: exit ${rc}, '${out}${err}'")
endif()
foreach(f share/troupe/gpt2/gpt2-vocab.json share/troupe/tokenizers/llama3/tokenizer.json share/doc/troupe/LICENSE)
  if(NOT EXISTS ${PREFIX}/${f})
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()
file(REMOVE_RECURSE ${PREFIX})
