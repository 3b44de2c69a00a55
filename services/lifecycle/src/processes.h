// /proc and small-file helpers of the local provider (local_provider.h
// declares the public ones: ReadProcStat, FindLabelled).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>

namespace relay::lifecycle {

// The whole file, or "" when it cannot be read (meant for /proc and the
// provider's own small state files).
std::string ReadSmallFile(const std::string& path);

// Signals every member of session `sid`: the process group first, then any
// member that moved to a group of its own. Never pid 1's or the caller's
// own session.
void SignalSession(int64_t sid, int sig);

// What the local provider knows of the processes it started (nodes' and
// jobs' session leaders), each known by its pid and start time (field 22 of
// /proc/<pid>/stat: a reused pid has another). Not thread-safe: the
// controller calls the provider under one lock.
class Children {
 public:
  // Alive, or its exit code when it was our child (left -1 when unknown: a
  // process another instance started, or one reaped by someone else).
  void Check(int64_t pid, int64_t start_ticks, bool& alive, int& exit_code);

  // The session the recorded process leads or led may be signalled (see
  // processes.cc).
  bool SessionToSignal(int64_t pid, int64_t start_ticks) const;

 private:
  void Remember(int64_t pid, int64_t start_ticks, int exit_code);

  std::map<int64_t, std::pair<int64_t, int>> exited_;  // pid -> (start ticks, exit code)
  std::deque<std::pair<int64_t, int64_t>> exited_order_;  // (pid, start ticks), oldest first
};

}  // namespace relay::lifecycle
