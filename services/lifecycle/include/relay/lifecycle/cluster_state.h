// A cluster's states and the predicates the controller, its reconcile loop
// and the API share (states as lifecycle.proto spells them).
#pragma once

#include <algorithm>
#include <cstdint>

#include "relay/v1/lifecycle.pb.h"

namespace relay::lifecycle {

inline constexpr char kRequested[] = "REQUESTED";
inline constexpr char kProvisioning[] = "PROVISIONING";
inline constexpr char kRunning[] = "RUNNING";
inline constexpr char kIdle[] = "IDLE";
inline constexpr char kTerminating[] = "TERMINATING";
inline constexpr char kTerminated[] = "TERMINATED";
inline constexpr char kFailed[] = "FAILED";

// TERMINATED or FAILED: nothing more happens to it.
inline bool Ended(const v1::Cluster& c) { return c.state() == kTerminated || c.state() == kFailed; }
inline bool JobActive(const v1::Job& j) { return j.state() == "PENDING" || j.state() == "RUNNING"; }
inline bool NodeLive(const v1::Node& n) { return n.state() == "STARTING" || n.state() == "RUNNING"; }

// The length of [a0, a1) ∩ [b0, b1), 0 when they do not meet.
inline int64_t Overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  return std::max<int64_t>(0, std::min(a1, b1) - std::max(a0, b0));
}

}  // namespace relay::lifecycle
