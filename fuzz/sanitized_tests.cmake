# Lean builds of the tests scripts/fuzz_and_sanitize.sh runs under a sanitizer: <test>_sanitized,
# label `sanitized`. Each links tests/test_util.cpp and the libraries its test uses instead of
# troupe_test_util's every library (serve, inference, HF models...), so a sanitizer build
# compiles only what the chosen tests reach. The same test sources as tests/ (nothing copied).
#   TROUPE_SANITIZE (ASan + UBSan, build-fuzz beside the fuzz targets): the parsers and data path.
#   TROUPE_TSAN (ThreadSanitizer, build-tsan): the actor runtime; fuzz/tsan.supp lists CAF's own.
if(NOT (TROUPE_SANITIZE OR TROUPE_TSAN))
  return()
endif()
option(TROUPE_TSAN_CAF "CAF_* point at a CAF built with -fsanitize=thread: TSan also runs the actor tests" OFF)

add_library(troupe_sanitized_test_util STATIC ${PROJECT_SOURCE_DIR}/tests/test_util.cpp)
target_link_libraries(troupe_sanitized_test_util PUBLIC troupe_actors_fabric troupe_kernels GTest::gtest
                                                 PRIVATE troupe_warnings)
target_compile_definitions(troupe_sanitized_test_util PUBLIC TROUPE_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
                                                             TROUPE_NODE="${TROUPE_NODE}"
                                                      PRIVATE TROUPE_BINARY="$<TARGET_FILE:troupe>")

# troupe_sanitized_test(tests/<dir>/<name>_test.cpp [FULL_ONLY] [SOURCES helper.cpp...] LIBS library...):
# labels `sanitized` and, unless FULL_ONLY (by hand with --full), `sanitized_ci`.
function(troupe_sanitized_test src)
  cmake_parse_arguments(arg "FULL_ONLY" "" "SOURCES;LIBS" ${ARGN})
  get_filename_component(name ${src} NAME_WE)
  list(TRANSFORM arg_SOURCES PREPEND ${PROJECT_SOURCE_DIR}/)
  add_executable(${name}_sanitized ${PROJECT_SOURCE_DIR}/${src} ${arg_SOURCES})
  target_link_libraries(${name}_sanitized PRIVATE troupe_sanitized_test_util GTest::gtest_main troupe_warnings
                                                  ${arg_LIBS})
  add_test(NAME ${name}_sanitized COMMAND ${name}_sanitized)
  # One OpenMP and one BLAS thread: their runtimes are not instrumented (TSan would take their
  # barriers for races). Any report fails the test (UBSan's too; TSan exits 66 after its reports).
  set(env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1)
  if(TROUPE_TSAN)
    list(APPEND env "TSAN_OPTIONS=second_deadlock_stack=1:suppressions=${CMAKE_CURRENT_SOURCE_DIR}/tsan.supp")
  else()
    list(APPEND env ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1)
  endif()
  set(labels sanitized sanitized_ci)
  if(arg_FULL_ONLY)
    set(labels sanitized)
  endif()
  set_tests_properties(${name}_sanitized PROPERTIES LABELS "${labels}" TIMEOUT 900 ENVIRONMENT "${env}")
endfunction()

if(TROUPE_SANITIZE)
  foreach(src tests/data/chat_template_test.cpp tests/data/data_loader_test.cpp tests/data/gpt_dataset_test.cpp
              tests/data/indexed_dataset_test.cpp tests/data/preprocess_test.cpp tests/data/tokenizer_test.cpp)
    troupe_sanitized_test(${src} LIBS troupe_data)
  endforeach()
  troupe_sanitized_test(tests/data/hf_tokenizer_test.cpp LIBS troupe_data)
  foreach(src tests/storage/checkpoint_test.cpp tests/storage/safetensors_test.cpp
              tests/storage/shard_geometry_test.cpp)
    troupe_sanitized_test(${src} LIBS troupe_storage)
  endforeach()
  troupe_sanitized_test(tests/model/hf/hf_checkpoint_test.cpp LIBS troupe_model_hf)
  troupe_sanitized_test(tests/model/hf/hf_config_test.cpp LIBS troupe_model_hf)
  troupe_sanitized_test(tests/schedules/trace_test.cpp LIBS troupe_schedules)
endif()

if(TROUPE_TSAN)
  # Threads that meet through mutexes, condition variables and Asio (header-only, so
  # instrumented): the CPU collective groups and the HTTP server.
  troupe_sanitized_test(tests/actors/fabric/collectives_test.cpp LIBS troupe_actors_fabric)
  foreach(name http_server http_drain http_slow_clients)
    troupe_sanitized_test(tests/actors/http/${name}_test.cpp SOURCES tests/http_client.cpp tests/sse_client.cpp
                          LIBS troupe_actors_http)
  endforeach()
  # The actors: CAF hands a message over inside libcaf_core, which TSan sees only when CAF itself
  # was built with -fsanitize=thread; against Debian's libcaf every message reads as a race (the
  # sender's writes, the receiver's reads). So only with TROUPE_TSAN_CAF (CAF_*_LIBRARY and
  # CAF_INCLUDE_DIR pointing at such a build; scripts/fuzz_and_sanitize.sh --tsan-caf PREFIX).
  if(TROUPE_TSAN_CAF)
    foreach(name grad_reducer_actor loader_actor optimizer_actor stage_order trainer_actor failure runtime_trace)
      troupe_sanitized_test(tests/actors/train/${name}_test.cpp FULL_ONLY LIBS troupe_actors_train)
    endforeach()
  endif()
endif()
