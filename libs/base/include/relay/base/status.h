// The error model of relay: functions that can fail return absl::Status or
// absl::StatusOr<T>. Exceptions thrown by third-party code (Boost, yaml-cpp)
// are caught at the call site that owns that library and turned into a
// Status; none crosses a relay API. Invariant violations abort loudly
// (RELAY_CHECK); external input never does.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define RELAY_RETURN_IF_ERROR(expr)                 \
  do {                                              \
    ::absl::Status relay_status_ = (expr);          \
    if (!relay_status_.ok()) return relay_status_;  \
  } while (0)

#define RELAY_CONCAT_INNER(a, b) a##b
#define RELAY_CONCAT(a, b) RELAY_CONCAT_INNER(a, b)
#define RELAY_ASSIGN_OR_RETURN(lhs, expr) \
  RELAY_ASSIGN_OR_RETURN_IMPL(RELAY_CONCAT(relay_statusor_, __LINE__), lhs, expr)
#define RELAY_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()

// Aborts with file:line when an internal invariant does not hold.
#define RELAY_CHECK(cond)                                                       \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::fprintf(stderr, "%s:%d: RELAY_CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                             \
    }                                                                           \
  } while (0)
