// Free local ports for the processes relay-lifecycle starts (Ray's
// components). Internal to the lifecycle library.
#pragma once

#include <vector>

#include "absl/status/statusor.h"

namespace relay::lifecycle {

// N distinct ports free on 127.0.0.1 now (the kernel's choice). All N
// sockets stay bound until the last is chosen: a port picked and released
// one at a time can come back for the next pick, and a Ray node given the
// same port for two components refuses to start (seen: dashboard agent HTTP
// and gRPC both 47701). Another process may still take a port before Ray
// binds it; Ray then fails to start and the node is retried as any failed
// node is.
absl::StatusOr<std::vector<int>> FreePorts(int n);

}  // namespace relay::lifecycle
