#include "processes.h"

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

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

}  // namespace relay::lifecycle
