// /proc and small-file helpers of the local provider (local_provider.h
// declares the public ones: ReadProcStat, FindLabelled).
#pragma once

#include <cstdint>
#include <string>

namespace relay::lifecycle {

// The whole file, or "" when it cannot be read (meant for /proc and the
// provider's own small state files).
std::string ReadSmallFile(const std::string& path);

// Signals every member of session `sid`: the process group first, then any
// member that moved to a group of its own. Never pid 1's or the caller's
// own session.
void SignalSession(int64_t sid, int sig);

}  // namespace relay::lifecycle
