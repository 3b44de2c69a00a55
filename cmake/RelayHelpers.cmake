# Per-target helpers, so every target gets the same standard, warnings and
# sanitizer flags:
#   relay_cc_library(NAME SRCS ... DEPS ...)    -> relay_NAME, alias relay::NAME
#   relay_cc_binary(NAME SRCS ... DEPS ...)
#   relay_cc_test(NAME SRCS ... DEPS ... LABELS unit|integration|e2e
#                 [FIXTURES ...] [RESOURCE_LOCK ...] [TIMEOUT s])

# -Wnull-dereference is left out: with -O2 it reports false positives inside
# Boost.Asio headers (g++ 12).
add_library(relay_warnings INTERFACE)
target_compile_options(relay_warnings INTERFACE -Wall -Wextra -Wpedantic
  -Wnon-virtual-dtor -Wcast-align -Wimplicit-fallthrough
  $<$<CXX_COMPILER_ID:GNU>:-Wshadow=local>)
if(RELAY_WERROR)
  target_compile_options(relay_warnings INTERFACE -Werror)
endif()
# The sanitizer flags alone, for code built without our warnings (generated
# Protobuf/gRPC code): every object must be built the same way, or a
# sanitized object and an unsanitized one disagree (a TSan build crashed in
# protobuf::Map code inlined both ways).
add_library(relay_sanitize INTERFACE)
target_link_libraries(relay_warnings INTERFACE relay_sanitize)
if(RELAY_SANITIZE)
  target_compile_options(relay_sanitize INTERFACE -fsanitize=${RELAY_SANITIZE} -fno-omit-frame-pointer
    -fno-sanitize-recover=undefined)
  target_link_options(relay_sanitize INTERFACE -fsanitize=${RELAY_SANITIZE})
  if(RELAY_SANITIZE MATCHES "thread" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # Asio uses std::atomic_thread_fence, which g++ 12 flags under TSan.
    target_compile_options(relay_sanitize INTERFACE -Wno-tsan)
  endif()
endif()

function(relay_cc_library name)
  cmake_parse_arguments(A "" "" "SRCS;DEPS;PUBLIC_INCLUDE" ${ARGN})
  add_library(relay_${name} STATIC ${A_SRCS})
  add_library(relay::${name} ALIAS relay_${name})
  if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/include)
    target_include_directories(relay_${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include)
  endif()
  target_link_libraries(relay_${name} PUBLIC ${A_DEPS} PRIVATE relay_warnings)
endfunction()

function(relay_cc_binary name)
  cmake_parse_arguments(A "" "" "SRCS;DEPS" ${ARGN})
  add_executable(${name} ${A_SRCS})
  target_link_libraries(${name} PRIVATE ${A_DEPS} relay_warnings)
  if(TARGET PkgConfig::TCMALLOC)
    target_link_libraries(${name} PRIVATE PkgConfig::TCMALLOC)
  endif()
endfunction()

function(relay_cc_test name)
  cmake_parse_arguments(A "" "TIMEOUT" "SRCS;DEPS;LABELS;FIXTURES;RESOURCE_LOCK;ENV" ${ARGN})
  add_executable(${name} ${A_SRCS})
  target_link_libraries(${name} PRIVATE ${A_DEPS} GTest::gtest GTest::gmock GTest::gtest_main relay_warnings)
  add_test(NAME ${name} COMMAND ${name})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 120)
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${A_LABELS}" TIMEOUT ${A_TIMEOUT})
  if(A_FIXTURES)
    set_tests_properties(${name} PROPERTIES FIXTURES_REQUIRED "${A_FIXTURES}")
  endif()
  if(A_RESOURCE_LOCK)
    set_tests_properties(${name} PROPERTIES RESOURCE_LOCK "${A_RESOURCE_LOCK}")
  endif()
  if(A_ENV)
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "${A_ENV}")
  endif()
endfunction()
