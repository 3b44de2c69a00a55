#include "processes.h"

#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "relay/lifecycle/local_provider.h"

namespace relay::lifecycle {

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void SignalSession(int64_t sid, int sig) {
  // Never the whole machine, never the controller's own session.
  if (sid <= 1 || sid == ::getsid(0)) return;
  ::kill(static_cast<pid_t>(-sid), sig);
  DIR* d = ::opendir("/proc");
  if (!d) return;
  while (dirent* e = ::readdir(d)) {
    int64_t pid;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    ProcInfo p;
    if (ReadProcStat(pid, p) && p.sid == sid && p.state != 'Z') ::kill(static_cast<pid_t>(pid), sig);
  }
  ::closedir(d);
}

bool ReadProcStat(int64_t pid, ProcInfo& out) {
  std::string stat = ReadSmallFile(absl::StrCat("/proc/", pid, "/stat"));
  // "pid (comm) state ppid pgrp session ... starttime(22)": comm may hold
  // spaces and parentheses, so parse from the last ')'.
  size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return false;
  std::vector<absl::string_view> f = absl::StrSplit(absl::string_view(stat).substr(close + 2), ' ');
  // f[0] is field 3 (state); field n is f[n - 3].
  if (f.size() < 20 || f[0].empty()) return false;
  out.pid = pid;
  out.state = f[0][0];
  return absl::SimpleAtoi(f[6 - 3], &out.sid) && absl::SimpleAtoi(f[22 - 3], &out.start_ticks);
}

std::vector<LabelledProcess> FindLabelled(const std::string& owner) {
  std::vector<LabelledProcess> out;
  const std::string mark = std::string(kOwnerVariable) + "=" + owner;
  DIR* d = ::opendir("/proc");
  if (!d) return out;
  while (dirent* e = ::readdir(d)) {
    int64_t pid;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    std::string env = ReadSmallFile(absl::StrCat("/proc/", pid, "/environ"));
    if (env.find(mark) == std::string::npos) continue;
    LabelledProcess l;
    bool mine = false;
    for (absl::string_view kv : absl::StrSplit(absl::string_view(env), '\0')) {
      if (kv == mark) mine = true;
      auto take = [&](absl::string_view prefix, std::string& into) {
        if (kv.substr(0, prefix.size()) == prefix) into = std::string(kv.substr(prefix.size()));
      };
      take("RELAY_CLUSTER_ID=", l.cluster_id);
      take("RELAY_INSTALLATION=", l.installation);
      take("RELAY_NODE_ID=", l.node_id);
      take("RELAY_JOB_ID=", l.job_id);
    }
    if (!mine || !ReadProcStat(pid, l.proc) || l.proc.state == 'Z') continue;
    // Only what the provider started: a session of its own, never ours.
    if (l.proc.sid == ::getsid(0) || (l.node_id.empty() && l.job_id.empty())) continue;
    // Ray's workers rewrite their process title over the environment, which
    // can leave a label half-readable: without its cluster it names nothing.
    if (l.cluster_id.empty()) continue;
    out.push_back(std::move(l));
  }
  ::closedir(d);
  return out;
}

namespace {

// Its leader alive (and the recorded process).
bool OurSession(int64_t pid, int64_t start_ticks) {
  ProcInfo p;
  return ReadProcStat(pid, p) && p.state != 'Z' && (start_ticks == 0 || p.start_ticks == start_ticks);
}

}  // namespace

// Alive, or its exit code when it was our child. Looked at without
// reaping first (WNOWAIT), so the process is known to be the recorded one
// (its start time) before it is reaped: a later child of ours that got
// the pid keeps its exit code for its own record.
void Children::Check(int64_t pid, int64_t start_ticks, bool& alive, int& exit_code) {
  alive = false;
  if (pid <= 0) return;
  if (auto it = exited_.find(pid); it != exited_.end() && it->second.first == start_ticks) {
    exit_code = it->second.second;
    return;
  }
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) {
    // Another controller's child (ECHILD): the process table decides,
    // start time included. Interrupted: asked again next pass.
    alive = errno == EINTR || OurSession(pid, start_ticks);
    return;
  }
  ProcInfo p;
  const bool recorded = ReadProcStat(pid, p) && (start_ticks == 0 || p.start_ticks == start_ticks);
  if (info.si_pid == 0) {
    // Our child and running: the recorded process unless the pid is a
    // later child's (then the recorded one is long gone, code unknown).
    alive = recorded;
    return;
  }
  if (!recorded) return;  // a later child of ours ended under the pid: its own record reaps it
  // Ended: reaped, and its code kept.
  int status = 0;
  if (::waitpid(static_cast<pid_t>(pid), &status, WNOHANG) != static_cast<pid_t>(pid)) {
    alive = true;  // not reaped after all (EINTR): asked again next pass
    return;
  }
  exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  Remember(pid, start_ticks, exit_code);
}

// What was reaped, for a record checked again (a state reloaded after a
// failed write): the oldest forgotten first, past 100,000.
void Children::Remember(int64_t pid, int64_t start_ticks, int exit_code) {
  exited_[pid] = {start_ticks, exit_code};
  exited_order_.emplace_back(pid, start_ticks);
  if (exited_order_.size() <= 100'000) return;
  auto [old_pid, old_ticks] = exited_order_.front();
  exited_order_.pop_front();
  if (auto it = exited_.find(old_pid); it != exited_.end() && it->second.first == old_ticks) exited_.erase(it);
}

// The session the recorded process leads or led may be signalled: its
// leader runs or is its zombie (start time checked), or was reaped here
// and its pid not handed out since. Linux gives no process a pid number
// while some process still has it as its session id, so what has that
// session id then is what the leader left behind (a node's daemons, a
// job's background processes).
bool Children::SessionToSignal(int64_t pid, int64_t start_ticks) const {
  if (pid <= 0) return false;
  ProcInfo p;
  if (ReadProcStat(pid, p)) return start_ticks == 0 ? p.state != 'Z' : p.start_ticks == start_ticks;
  auto it = exited_.find(pid);
  return it != exited_.end() && it->second.first == start_ticks;
}

}  // namespace relay::lifecycle
