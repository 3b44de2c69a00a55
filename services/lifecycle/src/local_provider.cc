#include "relay/lifecycle/local_provider.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "relay/base/log.h"

extern char** environ;

namespace relay::lifecycle {
namespace {

namespace fs = std::filesystem;

std::string ReadSmallFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Signals every member of session `sid`: the process group first, then any
// member that moved to a group of its own.
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

class LocalProvider final : public NodeProvider {
 public:
  explicit LocalProvider(LocalProviderOptions o) : o_(std::move(o)) {}
  ~LocalProvider() override { Release(); }

  std::string name() const override { return "local"; }

  absl::Status Acquire() override {
    if (lock_fd_ >= 0) return absl::OkStatus();
    std::error_code ec;
    fs::create_directories(o_.state_dir, ec);
    std::string path = o_.state_dir + "/lifecycle.lock";
    int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot open ", path, ": ", std::strerror(errno)));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      return absl::UnavailableError("another relay-lifecycle on this host holds " + path);
    }
    lock_fd_ = fd;
    return absl::OkStatus();
  }
  void Release() override {
    if (lock_fd_ < 0) return;
    ::flock(lock_fd_, LOCK_UN);
    ::close(lock_fd_);
    lock_fd_ = -1;
  }

  absl::Status PrepareCluster(v1::Cluster& cluster) override {
    if (cluster.spec().kind() != "command") {
      return absl::FailedPreconditionError("the local provider runs command clusters; kind " + cluster.spec().kind() +
                                           " is not available");
    }
    std::error_code ec;
    fs::create_directories(WorkDir(cluster.id()), ec);
    if (ec) return absl::UnavailableError("cannot create " + WorkDir(cluster.id()) + ": " + ec.message());
    fs::create_directories(LogDir(cluster.id()), ec);
    if (ec) return absl::UnavailableError("cannot create " + LogDir(cluster.id()) + ": " + ec.message());
    cluster.set_log_dir(LogDir(cluster.id()));
    return absl::OkStatus();
  }

  absl::Status StartNode(const v1::Cluster& cluster, v1::Node& node) override {
    const v1::NodeGroup* group = nullptr;
    for (const auto& g : cluster.spec().node_groups()) {
      if (g.name() == node.group()) group = &g;
    }
    if (!group) return absl::InvalidArgumentError("node group " + node.group() + " is not in the spec");
    std::vector<std::string> argv(group->command().begin(), group->command().end());
    node.set_log_path(LogDir(cluster.id()) + "/" + node.id() + ".log");
    auto p = Spawn(argv, cluster, {{"RELAY_NODE_ID", node.id()}, {"RELAY_NODE_GROUP", node.group()}}, node.log_path());
    if (!p.ok()) return p.status();
    node.set_pid(p->pid);
    node.set_start_ticks(p->start_ticks);
    return absl::OkStatus();
  }

  NodeStatus CheckNode(const v1::Cluster&, const v1::Node& node) override {
    NodeStatus s;
    Check(node.pid(), node.start_ticks(), s.alive, s.exit_code);
    s.ready = s.alive;  // a command node serves once its process runs
    return s;
  }

  absl::Status StopNode(const v1::Cluster&, const v1::Node& node, bool force) override {
    if (node.pid() > 0 && OurSession(node.pid(), node.start_ticks())) SignalSession(node.pid(), force ? SIGKILL : SIGTERM);
    return absl::OkStatus();
  }

  absl::Status CleanupCluster(const v1::Cluster& cluster) override {
    std::error_code ec;
    fs::remove_all(WorkDir(cluster.id()), ec);
    return ec ? absl::UnavailableError("cannot remove " + WorkDir(cluster.id()) + ": " + ec.message())
              : absl::OkStatus();
  }

  absl::Status SubmitJob(const v1::Cluster& cluster, v1::Job& job) override {
    if (job.pid() > 0) return absl::OkStatus();
    job.set_log_path(LogDir(cluster.id()) + "/job-" + job.id() + ".log");
    auto p = Spawn({"/bin/sh", "-c", job.entrypoint()}, cluster, {{"RELAY_JOB_ID", job.id()}}, job.log_path());
    if (!p.ok()) return p.status();
    job.set_pid(p->pid);
    job.set_start_ticks(p->start_ticks);
    return absl::OkStatus();
  }

  JobStatus CheckJob(const v1::Cluster&, const v1::Job& job) override {
    JobStatus s;
    bool alive = false;
    Check(job.pid(), job.start_ticks(), alive, s.exit_code);
    if (alive) {
      s.state = "RUNNING";
    } else if (s.exit_code == 0) {
      s.state = "SUCCEEDED";
    } else {
      s.state = "FAILED";
      s.message = s.exit_code < 0 ? "the job's process ended and its exit code is unknown (not a child of this controller)"
                                  : ExitText(s.exit_code);
    }
    return s;
  }

  absl::Status StopJob(const v1::Cluster&, const v1::Job& job, bool force) override {
    if (job.pid() > 0 && OurSession(job.pid(), job.start_ticks())) SignalSession(job.pid(), force ? SIGKILL : SIGTERM);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<Owned>> Inventory() override {
    std::vector<Owned> out;
    for (auto& l : FindLabelled(o_.owner)) {
      out.push_back(Owned{l.cluster_id, l.node_id, l.job_id, l.proc.pid, l.proc.sid, l.proc.start_ticks});
    }
    return out;
  }

  absl::Status Remove(const Owned& orphan) override {
    if (orphan.sid == ::getsid(0) || orphan.pid == ::getpid()) return absl::OkStatus();
    ProcInfo p;
    if (!ReadProcStat(orphan.pid, p) || p.start_ticks != orphan.start_ticks) return absl::OkStatus();  // gone
    SignalSession(orphan.sid, SIGKILL);
    ::kill(static_cast<pid_t>(orphan.pid), SIGKILL);
    return absl::OkStatus();
  }

 private:
  struct Spawned {
    int64_t pid = 0;
    int64_t start_ticks = 0;
  };

  std::string WorkDir(const std::string& cluster) const { return o_.state_dir + "/clusters/" + cluster; }
  std::string LogDir(const std::string& cluster) const { return o_.state_dir + "/logs/" + cluster; }

  static std::string ExitText(int code) {
    return code >= 128 ? absl::StrCat("killed by signal ", code - 128) : absl::StrCat("exited with code ", code);
  }

  // posix_spawn rather than fork: the controller is a large threaded
  // process, and glibc's posix_spawn uses clone(CLONE_VFORK) with no
  // page-table copy. POSIX_SPAWN_SETSID makes each node its own session.
  absl::StatusOr<Spawned> Spawn(const std::vector<std::string>& argv, const v1::Cluster& cluster,
                                const std::map<std::string, std::string>& labels, const std::string& log_path) {
    if (argv.empty()) return absl::InvalidArgumentError("empty command");
    std::vector<std::string> env_store;
    for (char** e = environ; *e; ++e) {
      std::string_view kv(*e);
      if (kv.rfind("RELAY_", 0) == 0) continue;  // the service's own settings (and secrets) stay here
      env_store.emplace_back(kv);
    }
    env_store.push_back(std::string(kOwnerVariable) + "=" + o_.owner);
    env_store.push_back("RELAY_CLUSTER_ID=" + cluster.id());
    env_store.push_back("RELAY_TEAM=" + cluster.spec().team());
    for (const auto& [k, v] : labels) env_store.push_back(k + "=" + v);
    std::vector<char*> envp, args;
    for (auto& s : env_store) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_store = argv;
    for (auto& s : argv_store) args.push_back(s.data());
    args.push_back(nullptr);

    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawn_file_actions_addclosefrom_np(&fa, 3);
    std::string work = WorkDir(cluster.id());
    posix_spawn_file_actions_addchdir_np(&fa, work.c_str());
    sigset_t none;
    sigemptyset(&none);
    posix_spawnattr_setsigmask(&attr, &none);
    sigset_t dfl;
    sigfillset(&dfl);
    posix_spawnattr_setsigdefault(&attr, &dfl);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    pid_t pid = 0;
    int rc = posix_spawnp(&pid, args[0], &fa, &attr, args.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) return absl::FailedPreconditionError(absl::StrCat("cannot start ", argv[0], ": ", std::strerror(rc)));
    ProcInfo p;
    Spawned s{pid, 0};
    if (ReadProcStat(pid, p)) s.start_ticks = p.start_ticks;
    return s;
  }

  // Alive, or its exit code when it was our child.
  void Check(int64_t pid, int64_t start_ticks, bool& alive, int& exit_code) {
    alive = false;
    if (pid <= 0) return;
    if (auto it = exited_.find(pid); it != exited_.end() && it->second.first == start_ticks) {
      exit_code = it->second.second;
      return;
    }
    int status = 0;
    pid_t r = ::waitpid(static_cast<pid_t>(pid), &status, WNOHANG);
    if (r == pid) {
      exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      exited_[pid] = {start_ticks, exit_code};
      if (exited_.size() > 100'000) exited_.erase(exited_.begin());
      return;
    }
    // Our running child (r == 0), or another controller's (ECHILD): the
    // process table decides, start time included.
    alive = OurSession(pid, start_ticks);
  }

  static bool OurSession(int64_t pid, int64_t start_ticks) {
    ProcInfo p;
    return ReadProcStat(pid, p) && p.state != 'Z' && (start_ticks == 0 || p.start_ticks == start_ticks);
  }

  LocalProviderOptions o_;
  int lock_fd_ = -1;
  std::map<int64_t, std::pair<int64_t, int>> exited_;  // pid -> (start ticks, exit code)
};

}  // namespace

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
      take("RELAY_NODE_ID=", l.node_id);
      take("RELAY_JOB_ID=", l.job_id);
    }
    if (!mine || !ReadProcStat(pid, l.proc) || l.proc.state == 'Z') continue;
    // Only what the provider started: a session of its own, never ours.
    if (l.proc.sid == ::getsid(0) || (l.node_id.empty() && l.job_id.empty())) continue;
    out.push_back(std::move(l));
  }
  ::closedir(d);
  return out;
}

std::unique_ptr<NodeProvider> NewLocalProvider(LocalProviderOptions options) {
  return std::make_unique<LocalProvider>(std::move(options));
}

}  // namespace relay::lifecycle
