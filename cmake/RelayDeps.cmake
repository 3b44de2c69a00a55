# Every third-party dependency is found here, once. All come from Debian's
# packages (tools/install-deps). find_package where a CMake package ships,
# pkg-config otherwise (librdkafka, gRPC, expat).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
find_package(OpenSSL 3 REQUIRED)
find_package(Protobuf REQUIRED)
find_package(absl REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(simdjson REQUIRED)
find_package(prometheus-cpp REQUIRED)
find_package(Boost 1.81 REQUIRED COMPONENTS json url)
pkg_check_modules(RDKAFKA REQUIRED IMPORTED_TARGET rdkafka)
pkg_check_modules(EXPAT REQUIRED IMPORTED_TARGET expat)
# gRPC: Debian ships no CMake package for it, only pkg-config and the plugin.
pkg_check_modules(GRPCPP REQUIRED IMPORTED_TARGET grpc++)
find_program(GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
# Server reflection (relay-lifecycle): a library of the same package with
# no pkg-config file of its own.
find_library(GRPCPP_REFLECTION grpc++_reflection REQUIRED)
find_package(ZLIB REQUIRED)
# tcmalloc for service binaries: glibc malloc was ~17% of intake's CPU at
# saturation (buffers allocated on I/O threads, freed on Kafka's); tcmalloc
# measured +8% throughput. Not with sanitizers, which bring their own.
if(NOT RELAY_SANITIZE AND NOT RELAY_FUZZ)
  pkg_check_modules(TCMALLOC REQUIRED IMPORTED_TARGET libtcmalloc_minimal)
endif()
if(RELAY_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
if(RELAY_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()
