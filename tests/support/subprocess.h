// Starts a program as a child process for integration tests, and stops it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace relay::testing {

class Subprocess {
 public:
  // Starts argv[0] (a path) with the current environment plus `env`;
  // stdout/stderr go to `log_path` (appended) when given.
  Subprocess(std::vector<std::string> argv, std::map<std::string, std::string> env = {},
             std::string log_path = "");
  ~Subprocess();  // SIGKILL if still running
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  bool Running();
  void Signal(int sig);
  // Waits for exit; returns the exit code, 128+signal, or -1 on timeout.
  int Wait(std::chrono::milliseconds timeout);

 private:
  pid_t pid_ = -1;
  int status_ = -1;
};

// Runs a command line through /bin/sh and returns its exit code; stdout is
// appended to *out when given.
int RunCommand(const std::string& command, std::string* out = nullptr);

// Reads a whole file; empty when missing.
std::string ReadFile(const std::string& path);

// Polls `path` until it exists and is non-empty, or the timeout.
bool WaitForFile(const std::string& path, std::chrono::milliseconds timeout);

// Environment variable or `def`.
std::string Env(const char* name, const std::string& def = "");

// Writes a file whole or not at all (a temporary renamed over it), so a
// service reloading it never sees half a file.
void WriteFileAtomically(const std::string& path, const std::string& text);

// A random decimal string, to keep names of tests sharing a broker apart.
std::string Unique();

}  // namespace relay::testing
