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
#include <deque>
#include <filesystem>
#include <pwd.h>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include <boost/json.hpp>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "free_ports.h"
#include "processes.h"
#include "safe_fs.h"
#include "relay/base/log.h"
#include "relay/base/random.h"
#include "relay/base/status.h"
#include "relay/http/client.h"

extern char** environ;

namespace relay::lifecycle {
namespace {

namespace fs = std::filesystem;



// One request to a Ray process on 127.0.0.1 (short timeouts: the reconcile
// pass waits for it).
absl::StatusOr<http::ClientResponse> RayCall(int port, boost::beast::http::verb method, const std::string& target,
                                             const std::string& token, const std::string& body = "") {
  http::ClientOptions o;
  o.connect_timeout = std::chrono::milliseconds(1000);
  o.request_timeout = std::chrono::milliseconds(3000);
  auto client = http::Client::New("http://127.0.0.1:" + std::to_string(port), o);
  if (!client.ok()) return client.status();
  std::map<std::string, std::string> headers;
  if (!token.empty()) headers["authorization"] = "Bearer " + token;
  if (!body.empty()) headers["content-type"] = "application/json";
  return (*client)->Send(method, target, headers, body);
}

int PortOf(const std::string& address) {
  int port = 0;
  auto colon = address.rfind(':');
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) return 0;
  return port;
}

// The installation id of `state_dir`: made once (random), then read.
absl::StatusOr<std::string> InstallationId(const std::string& state_dir) {
  std::error_code ec;
  fs::create_directories(state_dir, ec);
  if (ec) return absl::UnavailableError("cannot create " + state_dir + ": " + ec.message());
  std::string path = state_dir + "/installation-id";
  std::string id(absl::StripAsciiWhitespace(ReadSmallFile(path)));
  if (!id.empty()) return id;
  id = RandomHex(8);
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::ofstream(tmp) << id << "\n";
  // link(2) fails when another instance of the installation made it first:
  // then its id is the one.
  if (::link(tmp.c_str(), path.c_str()) != 0 && errno != EEXIST) {
    std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return absl::UnavailableError("cannot write " + path + ": " + why);
  }
  ::unlink(tmp.c_str());
  id = std::string(absl::StripAsciiWhitespace(ReadSmallFile(path)));
  if (id.empty()) return absl::UnavailableError("cannot read " + path);
  return id;
}

// A shared claim on <runtime_dir>/<owner>.lock for this installation (see
// local_provider.h). flock: released by the kernel when the process dies.
class OwnerClaim {
 public:
  static absl::StatusOr<std::unique_ptr<OwnerClaim>> Take(const std::string& runtime_dir, const std::string& owner,
                                                          const std::string& installation,
                                                          const std::string& state_dir) {
    if (owner.empty() || owner.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
                             std::string::npos || owner[0] == '.') {
      return absl::InvalidArgumentError("lifecycle.owner '" + owner + "': letters, digits, '.', '_' and '-' only");
    }
    std::error_code ec;
    fs::create_directories(runtime_dir, ec);
    if (ec) return absl::UnavailableError("cannot create " + runtime_dir + ": " + ec.message());
    // Registration is serialized by a second lock, so checking the holders
    // and writing who we are is one step for everyone.
    std::string mutex_path = runtime_dir + "/" + owner + ".mutex";
    int mutex = ::open(mutex_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    if (mutex < 0) return absl::UnavailableError("cannot open " + mutex_path + ": " + std::strerror(errno));
    ::flock(mutex, LOCK_EX);
    auto unlock = absl::MakeCleanup([mutex] { ::close(mutex); });
    std::string path = runtime_dir + "/" + owner + ".lock";
    int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd < 0) return absl::UnavailableError("cannot open " + path + ": " + std::strerror(errno));
    auto claim = std::unique_ptr<OwnerClaim>(new OwnerClaim(fd));
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      // Nobody holds it: register this installation, then hold it shared
      // (other instances of the installation join).
      std::string text = absl::StrCat("installation=", installation, "\nstate_dir=", state_dir, "\npid=", ::getpid(), "\n");
      if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
        return absl::UnavailableError("cannot write " + path + ": " + std::strerror(errno));
      }
      ::flock(fd, LOCK_SH);
      return claim;
    }
    std::map<std::string, std::string> holder;
    for (absl::string_view line : absl::StrSplit(ReadSmallFile(path), '\n', absl::SkipEmpty())) {
      auto eq = line.find('=');
      if (eq != absl::string_view::npos) holder[std::string(line.substr(0, eq))] = std::string(line.substr(eq + 1));
    }
    if (holder["installation"] == installation && ::flock(fd, LOCK_SH | LOCK_NB) == 0) return claim;
    ProcInfo p;
    int64_t pid = 0;
    bool alive = absl::SimpleAtoi(holder["pid"], &pid) && ReadProcStat(pid, p) && p.state != 'Z';
    return absl::FailedPreconditionError(absl::StrCat(
        "lifecycle.owner '", owner, "' is claimed on this host by another relay-lifecycle installation (id ",
        holder["installation"], ", state dir ", holder["state_dir"], ", registered by pid ", holder["pid"],
        alive ? ", running" : ", since ended; an instance of it still runs", "; lock ", path,
        "): its orphan sweep and this one would kill each other's processes. Give each installation its own "
        "lifecycle.owner"));
  }
  ~OwnerClaim() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }

 private:
  explicit OwnerClaim(int fd) : fd_(fd) {}
  int fd_;
};

// Whether another uid can run `path` (or enter it, a directory): every
// directory on the way to it (symlinks resolved) searchable by others, the
// file executable by them.
bool RunnableByOthers(const std::string& path) {
  std::error_code ec;
  fs::path real = fs::canonical(path, ec);
  if (ec) return false;
  struct stat st {};
  if (::stat(real.c_str(), &st) != 0 || !(st.st_mode & S_IXOTH)) return false;
  for (fs::path dir = real.parent_path(); !dir.empty(); dir = dir.parent_path()) {
    if (::stat(dir.c_str(), &st) != 0 || !(st.st_mode & S_IXOTH)) return false;
    if (dir == dir.root_path()) break;
  }
  return true;
}

// What a node or job may see of the service's environment: an allow list,
// never "everything but RELAY_*" (a secret in any other variable would
// leak to every team's processes).
bool Inherited(std::string_view name) {
  static const char* kAllowed[] = {"PATH", "LANG", "LANGUAGE", "TZ"};
  for (const char* a : kAllowed) {
    if (name == a) return true;
  }
  return name.rfind("LC_", 0) == 0;
}

class LocalProvider final : public NodeProvider {
 public:
  LocalProvider(LocalProviderOptions o, std::string installation, std::unique_ptr<OwnerClaim> claim)
      : o_(std::move(o)), installation_(std::move(installation)), claim_(std::move(claim)) {}
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

  absl::Status Supports(const v1::ClusterSpec& spec) const override {
    if (!isolated() && spec.team() != o_.team) {
      return absl::FailedPreconditionError(
          "this relay-lifecycle runs team " + o_.team + "'s clusters only (lifecycle.local.team): the local provider "
          "never runs two teams under one uid; isolate teams with lifecycle.local.uid_range (as root) or use the "
          "kubernetes provider");
    }
    if (spec.kind() == "command") return absl::OkStatus();
    if (spec.kind() == "ray") {
      if (o_.ray_bin.empty() || ::access(o_.ray_bin.c_str(), X_OK) != 0) {
        return absl::FailedPreconditionError("Ray clusters need lifecycle.ray_bin: the `ray` of a venv with ray[default] "
                                             "(tools/python/setup-env installs one)");
      }
      // A team's uid must be able to run the venv (and its interpreter).
      std::string python = (fs::path(o_.ray_bin).parent_path() / "python").string();
      if (o_.run_as_uid >= 0 || isolated()) {
        if (!RunnableByOthers(o_.ray_bin) || !RunnableByOthers(python)) {
          return absl::FailedPreconditionError("lifecycle.ray_bin " + o_.ray_bin + " (or its python) is not runnable "
                                               "by the uid nodes run as: put the venv where every directory is searchable by "
                                               "others (e.g. /opt/relay/pyenv)");
        }
      }
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError("the local provider has no kind " + spec.kind());
  }

  absl::Status PrepareCluster(v1::Cluster& cluster) override {
    RELAY_RETURN_IF_ERROR(Supports(cluster.spec()));
    auto& data = *cluster.mutable_provider_data();
    if (isolated() && !data.count("uid")) {
      RELAY_ASSIGN_OR_RETURN(int64_t uid, UidFor(cluster.spec().team()));
      data["uid"] = std::to_string(uid);
    } else if (!isolated() && o_.run_as_uid >= 0 && !data.count("uid")) {
      data["uid"] = std::to_string(o_.run_as_uid);
      data["gid"] = std::to_string(o_.run_as_gid);
    }
    if (cluster.spec().kind() == "ray" && !cluster.secrets().count("ray_token")) {
      (*cluster.mutable_secrets())["ray_token"] = RandomHex(24);
      RELAY_ASSIGN_OR_RETURN(std::vector<int> ports, FreePorts(3));
      const int gcs = ports[0], dashboard = ports[1], client = ports[2];
      auto& d = *cluster.mutable_provider_data();
      d["gcs_address"] = "127.0.0.1:" + std::to_string(gcs);
      d["dashboard_port"] = std::to_string(dashboard);
      d["client_port"] = std::to_string(client);
      d["temp_dir"] = TempDir(cluster);
    }
    RELAY_RETURN_IF_ERROR(EnsureClusterDirs(cluster));
    cluster.set_log_dir(LogDir(cluster.id()));
    return absl::OkStatus();
  }

  // The cluster's directories and token file, with their owners and modes.
  // Everything is made through descriptors of directories only the service
  // can write (safe_fs.h): the work dir and the Ray temp dir are the team's,
  // and nothing is ever opened by name inside them.
  absl::Status EnsureClusterDirs(const v1::Cluster& cluster) const {
    // Searchable, not listable, by the teams' uids; logs the service's own.
    RELAY_ASSIGN_OR_RETURN(Fd state, OpenServiceDir(o_.state_dir, 0711));
    RELAY_ASSIGN_OR_RETURN(Fd clusters, EnsureDirAt(state, "clusters", 0711));
    RELAY_ASSIGN_OR_RETURN(Fd logs, EnsureDirAt(state, "logs", 0700));
    RELAY_RETURN_IF_ERROR(EnsureDirAt(clusters, cluster.id(), 0700, Ids(cluster)).status());
    RELAY_RETURN_IF_ERROR(EnsureDirAt(logs, cluster.id(), 0700).status());
    if (cluster.spec().kind() == "ray") {
      // The token: a file of the nodes' uid in the service's own directory
      // (in the work dir, a team could plant a link where root writes).
      RELAY_ASSIGN_OR_RETURN(Fd tokens, EnsureDirAt(state, "tokens", 0711));
      RELAY_RETURN_IF_ERROR(WriteFileAt(tokens, cluster.id(), Token(cluster), 0600, Ids(cluster)));
      RELAY_ASSIGN_OR_RETURN(Fd team, TeamTempDir(cluster));
      RELAY_RETURN_IF_ERROR(EnsureDirAt(team, cluster.id(), 0700, Ids(cluster)).status());
    }
    return absl::OkStatus();
  }

  // <ray_temp_root>/<uid>: the service's, group = the nodes' gid, 0710, so
  // only that uid can enter it. Ray makes a cluster's temp dir under it
  // world-writable, which is harmless only behind such a parent.
  absl::StatusOr<Fd> TeamTempDir(const v1::Cluster& cluster) const {
    RELAY_ASSIGN_OR_RETURN(Fd root, OpenServiceDir(o_.ray_temp_root, 0711));
    Owner ids = Ids(cluster);
    Owner group{static_cast<int64_t>(::geteuid()), ids.uid >= 0 ? ids.gid : static_cast<int64_t>(::getegid())};
    return EnsureDirAt(root, TeamDirName(cluster), 0710, group);
  }
  std::string TeamDirName(const v1::Cluster& cluster) const {
    int64_t uid = Ids(cluster).uid;
    return std::to_string(uid >= 0 ? uid : static_cast<int64_t>(::geteuid()));
  }
  std::string TempDir(const v1::Cluster& cluster) const {
    return o_.ray_temp_root + "/" + TeamDirName(cluster) + "/" + cluster.id();
  }

  absl::Status StartNode(const v1::Cluster& cluster, v1::Node& node) override {
    const v1::NodeGroup* group = nullptr;
    for (const auto& g : cluster.spec().node_groups()) {
      if (g.name() == node.group()) group = &g;
    }
    if (!group) return absl::InvalidArgumentError("node group " + node.group() + " is not in the spec");
    // Made again if missing: a leader on another host prepared the cluster.
    RELAY_RETURN_IF_ERROR(EnsureClusterDirs(cluster));
    node.set_log_path(LogDir(cluster.id()) + "/" + node.id() + ".log");
    std::map<std::string, std::string> env{{"RELAY_NODE_ID", node.id()}, {"RELAY_NODE_GROUP", node.group()}};
    std::vector<std::string> argv(group->command().begin(), group->command().end());
    if (cluster.spec().kind() == "ray") {
      RELAY_ASSIGN_OR_RETURN(argv, RayArgv(cluster, *group, node));
      RayEnv(cluster, env);
    }
    auto p = Spawn(argv, cluster, env, node.log_path());
    if (!p.ok()) return p.status();
    node.set_pid(p->pid);
    node.set_start_ticks(p->start_ticks);
    return absl::OkStatus();
  }

  NodeStatus CheckNode(const v1::Cluster& cluster, const v1::Node& node) override {
    NodeStatus s;
    children_.Check(node.pid(), node.start_ticks(), s.alive, s.exit_code);
    s.ready = s.alive;  // a command node serves once its process runs
    if (s.alive && cluster.spec().kind() == "ray") {
      // Public health paths (no token needed): the head's GCS through the
      // dashboard, a node's raylet through its agent.
      auto r = RayCall(PortOf(node.address()), boost::beast::http::verb::get, "/api/healthz", "");
      s.ready = r.ok() && r->status == 200;
      if (s.ready && IsHead(cluster, node)) {
        auto g = RayCall(DashboardPort(cluster), boost::beast::http::verb::get, "/api/gcs_healthz", "");
        s.ready = g.ok() && g->status == 200;
      }
    }
    return s;
  }

  absl::Status StopNode(const v1::Cluster&, const v1::Node& node, bool force) override {
    if (children_.SessionToSignal(node.pid(), node.start_ticks())) SignalSession(node.pid(), force ? SIGKILL : SIGTERM);
    return absl::OkStatus();
  }

  // The team's trees are removed by descriptor, never following a link a
  // team left in them (safe_fs.h).
  absl::Status CleanupCluster(const v1::Cluster& cluster) override {
    RELAY_ASSIGN_OR_RETURN(Fd state, OpenServiceDir(o_.state_dir, 0711));
    RELAY_ASSIGN_OR_RETURN(Fd clusters, EnsureDirAt(state, "clusters", 0711));
    absl::Status st = RemoveTreeAt(clusters, cluster.id());
    if (cluster.spec().kind() == "ray") {
      if (auto tokens = EnsureDirAt(state, "tokens", 0711); tokens.ok()) {
        if (::unlinkat(tokens->get(), cluster.id().c_str(), 0) != 0 && errno != ENOENT && st.ok()) {
          st = absl::UnavailableError("cannot remove the token file of " + cluster.id() + ": " + std::strerror(errno));
        }
      }
      auto team = TeamTempDir(cluster);
      absl::Status temp = team.ok() ? RemoveTreeAt(*team, cluster.id()) : team.status();
      if (!temp.ok() && st.ok()) st = temp;
    }
    return st;
  }

  absl::Status SubmitJob(const v1::Cluster& cluster, v1::Job& job) override {
    if (cluster.spec().kind() == "ray") return SubmitRayJob(cluster, job);
    if (job.pid() > 0) return absl::OkStatus();
    const std::string key = cluster.id() + "/" + job.id();
    job.set_log_path(LogDir(cluster.id()) + "/job-" + job.id() + ".log");
    // Started already, and its RUNNING record was lost (a failed write, the
    // state reloaded as PENDING): the same process again, never a second
    // run; its exit code is still this provider's to read.
    if (auto it = started_.find(key); it != started_.end()) {
      job.set_pid(it->second.pid);
      job.set_start_ticks(it->second.start_ticks);
      return absl::OkStatus();
    }
    RELAY_RETURN_IF_ERROR(EnsureClusterDirs(cluster));
    // Started by an earlier instance (its log is made when it starts), which
    // ended before recording it: at most once, so not again.
    if (struct stat st {}; ::lstat(job.log_path().c_str(), &st) == 0) {
      return absl::FailedPreconditionError(
          "started before by an instance that ended before recording it (its log exists; its outcome is unknown); "
          "not started twice");
    }
    auto p = Spawn({"/bin/sh", "-c", job.entrypoint()}, cluster, {{"RELAY_JOB_ID", job.id()}}, job.log_path());
    if (!p.ok()) return p.status();
    job.set_pid(p->pid);
    job.set_start_ticks(p->start_ticks);
    started_[key] = *p;
    started_order_.push_back(key);
    if (started_order_.size() > 100'000) {
      started_.erase(started_order_.front());
      started_order_.pop_front();
    }
    return absl::OkStatus();
  }

  JobStatus CheckJob(const v1::Cluster& cluster, const v1::Job& job) override {
    if (cluster.spec().kind() == "ray") return CheckRayJob(cluster, job);
    JobStatus s;
    bool alive = false;
    children_.Check(job.pid(), job.start_ticks(), alive, s.exit_code);
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

  absl::Status StopJob(const v1::Cluster& cluster, const v1::Job& job, bool force) override {
    if (cluster.spec().kind() == "ray") {
      auto r = RayCall(DashboardPort(cluster), boost::beast::http::verb::post, "/api/jobs/" + job.id() + "/stop",
                       Token(cluster));
      if (!r.ok()) return r.status();
      return absl::OkStatus();
    }
    if (children_.SessionToSignal(job.pid(), job.start_ticks())) SignalSession(job.pid(), force ? SIGKILL : SIGTERM);
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<Owned>> Inventory() override {
    std::vector<Owned> out;
    for (auto& l : FindLabelled(o_.owner)) {
      // Another installation's process under our owner name (it ran before
      // this one claimed the name): not ours to remove, whatever it is.
      if (!l.installation.empty() && l.installation != installation_) {
        if (foreign_logged_.insert(l.proc.pid).second) {
          log::Warn("a process with this owner label belongs to another installation; left alone",
                    {{"pid", l.proc.pid}, {"cluster", l.cluster_id}, {"installation", l.installation},
                     {"ours", installation_}});
        }
        continue;
      }
      out.push_back(Owned{l.cluster_id, l.node_id, l.job_id, l.proc.pid, l.proc.sid, l.proc.start_ticks, ""});
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

  static bool IsHead(const v1::Cluster& c, const v1::Node& n) {
    for (const auto& g : c.spec().node_groups()) {
      if (g.name() == n.group()) return g.ray_role() == "head";
    }
    return false;
  }
  static int DashboardPort(const v1::Cluster& c) {
    int port = 0;
    auto it = c.provider_data().find("dashboard_port");
    if (it != c.provider_data().end() && !absl::SimpleAtoi(it->second, &port)) port = 0;
    return port;
  }
  static std::string Token(const v1::Cluster& c) {
    auto it = c.secrets().find("ray_token");
    return it == c.secrets().end() ? "" : it->second;
  }
  static std::string Data(const v1::Cluster& c, const std::string& key) {
    auto it = c.provider_data().find(key);
    return it == c.provider_data().end() ? "" : it->second;
  }

  // `ray start --block` for one node: the node process is the block
  // process, its Ray daemons die with it (Ray sets PR_SET_PDEATHSIG).
  absl::StatusOr<std::vector<std::string>> RayArgv(const v1::Cluster& c, const v1::NodeGroup& g, v1::Node& node) {
    RELAY_ASSIGN_OR_RETURN(std::vector<int> ports, FreePorts(4));
    const int agent_http = ports[0], agent_grpc = ports[1], runtime_env = ports[2], metrics = ports[3];
    node.set_address("127.0.0.1:" + std::to_string(agent_http));
    double cpus = g.resources().cpus() > 0 ? g.resources().cpus() : 1;
    int64_t store = std::max<int64_t>(g.resources().memory_mb() / 4, 80) * 1024 * 1024;  // Ray's minimum is 75 MiB
    std::vector<std::string> a = {o_.ray_bin, "start", "--block", "--node-ip-address=127.0.0.1",
                                  "--dashboard-agent-listen-port=" + std::to_string(agent_http),
                                  "--dashboard-agent-grpc-port=" + std::to_string(agent_grpc),
                                  "--runtime-env-agent-port=" + std::to_string(runtime_env),
                                  "--metrics-export-port=" + std::to_string(metrics),
                                  "--temp-dir=" + TempDir(c),
                                  "--num-cpus=" + absl::StrCat(static_cast<int64_t>(cpus)),
                                  "--num-gpus=" + std::to_string(g.resources().gpus()),
                                  "--object-store-memory=" + std::to_string(store), "--disable-usage-stats",
                                  // 0: workers bind ports the kernel picks (the default range is shared by every cluster)
                                  "--min-worker-port=0", "--max-worker-port=0"};
    if (g.ray_role() == "head") {
      a.insert(a.end(), {"--head", "--port=" + std::to_string(PortOf(Data(c, "gcs_address"))),
                         "--dashboard-host=127.0.0.1", "--include-dashboard=true",
                         "--dashboard-port=" + Data(c, "dashboard_port"),
                         "--ray-client-server-port=" + Data(c, "client_port")});
    } else {
      a.push_back("--address=" + Data(c, "gcs_address"));
    }
    return a;
  }

  void RayEnv(const v1::Cluster& c, std::map<std::string, std::string>& env) const {
    env["RAY_AUTH_MODE"] = "token";
    // A file only the node's uid can read, not the environment (readable
    // through /proc by any process of that uid, and inherited by every job).
    env["RAY_AUTH_TOKEN_PATH"] = TokenFile(c.id());
    env["RAY_USAGE_STATS_ENABLED"] = "0";
    env["RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S"] = "0";
    const char* path = std::getenv("PATH");
    env["PATH"] = fs::path(o_.ray_bin).parent_path().string() + ":" + (path ? path : "/usr/bin:/bin");
  }

  bool isolated() const { return o_.uid_first > 0; }
  // The uid and gid a cluster's processes run as (gid = uid for a team's
  // uid from the range); -1: the service's own.
  static Owner Ids(const v1::Cluster& c) {
    Owner ids;
    auto it = c.provider_data().find("uid");
    if (it != c.provider_data().end() && !absl::SimpleAtoi(it->second, &ids.uid)) ids.uid = -1;
    ids.gid = ids.uid;
    auto g = c.provider_data().find("gid");
    if (ids.uid >= 0 && g != c.provider_data().end() && !absl::SimpleAtoi(g->second, &ids.gid)) ids.gid = ids.uid;
    return ids;
  }
  // The team's uid, allocated from the range on first use and kept in
  // <state_dir>/team-uids ("team uid" lines): the same across restarts.
  absl::StatusOr<int64_t> UidFor(const std::string& team) {
    if (team.empty() || team.find_first_of(" \n") != std::string::npos) {
      return absl::InvalidArgumentError("team '" + team + "' cannot be given a uid");
    }
    std::string path = o_.state_dir + "/team-uids";
    std::map<std::string, int64_t> uids;
    std::set<int64_t> used;
    for (absl::string_view line : absl::StrSplit(ReadSmallFile(path), '\n', absl::SkipEmpty())) {
      std::vector<std::string> f = absl::StrSplit(line, ' ');
      int64_t uid;
      if (f.size() == 2 && absl::SimpleAtoi(f[1], &uid)) {
        uids[f[0]] = uid;
        used.insert(uid);
      }
    }
    if (auto it = uids.find(team); it != uids.end()) return it->second;
    int64_t uid = o_.uid_first;
    while (used.count(uid) && uid <= o_.uid_last) ++uid;
    if (uid > o_.uid_last) {
      return absl::ResourceExhaustedError(absl::StrCat("lifecycle.local.uid_range ", o_.uid_first, "-", o_.uid_last,
                                                       " has no uid left for team ", team));
    }
    std::string text = ReadSmallFile(path) + team + " " + std::to_string(uid) + "\n";
    std::string tmp = path + ".tmp";
    std::ofstream(tmp, std::ios::trunc) << text;
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
      return absl::UnavailableError("cannot write " + path + ": " + std::strerror(errno));
    }
    log::Info("team given a uid", {{"team", team}, {"uid", uid}});
    return uid;
  }
  std::string TokenFile(const std::string& cluster) const { return o_.state_dir + "/tokens/" + cluster; }

  absl::Status SubmitRayJob(const v1::Cluster& c, v1::Job& job) {
    job.set_log_path(LogDir(c.id()) + "/job-" + job.id() + ".log");
    boost::json::object body{{"entrypoint", job.entrypoint()},
                             {"submission_id", job.id()},
                             {"metadata", boost::json::object{{"relay_cluster", c.id()}, {"relay_team", c.spec().team()}}}};
    auto r = RayCall(DashboardPort(c), boost::beast::http::verb::post, "/api/jobs/", Token(c), boost::json::serialize(body));
    if (!r.ok()) return r.status();
    if (r->status == 200) return absl::OkStatus();
    // Submitted before (a retry after a crash): Ray says it exists.
    if (r->body.find("already exists") != std::string::npos) return absl::OkStatus();
    std::string why = absl::StrCat("Ray Jobs API answered ", r->status, ": ", r->body.substr(0, 300));
    // A refusal of the job itself fails it; anything else is retried.
    return r->status / 100 == 4 ? absl::InvalidArgumentError(why) : absl::UnavailableError(why);
  }

  JobStatus CheckRayJob(const v1::Cluster& c, const v1::Job& job) {
    JobStatus s;
    s.state = "RUNNING";  // unknown answers keep it running; teardown ends it
    auto r = RayCall(DashboardPort(c), boost::beast::http::verb::get, "/api/jobs/" + job.id(), Token(c));
    if (!r.ok() || r->status != 200) return s;
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(r->body, ec);
    if (ec || !v.is_object()) return s;
    const auto& o = v.as_object();
    std::string status = o.contains("status") && o.at("status").is_string() ? std::string(o.at("status").as_string()) : "";
    if (status == "PENDING" || status == "RUNNING" || status.empty()) return s;
    s.state = status == "SUCCEEDED" ? "SUCCEEDED" : status == "STOPPED" ? "STOPPED" : "FAILED";
    if (const auto* code = o.if_contains("driver_exit_code"); code && code->is_int64()) s.exit_code = static_cast<int>(code->as_int64());
    if (s.exit_code < 0 && s.state == "SUCCEEDED") s.exit_code = 0;
    if (const auto* m = o.if_contains("message"); m && m->is_string() && s.state != "SUCCEEDED") s.message = std::string(m->as_string());
    // Keep the output: it goes with the cluster otherwise.
    auto logs = RayCall(DashboardPort(c), boost::beast::http::verb::get, "/api/jobs/" + job.id() + "/logs", Token(c));
    if (logs.ok() && logs->status == 200) {
      boost::json::value l = boost::json::parse(logs->body, ec);
      if (!ec && l.is_object() && l.as_object().contains("logs") && l.as_object().at("logs").is_string()) {
        // The log dir is the service's own (0700): written by descriptor all the same.
        auto dir = LogDirFd(c.id());
        if (dir.ok()) {
          (void)WriteFileAt(*dir, "job-" + job.id() + ".log", std::string(l.as_object().at("logs").as_string()), 0600);
        }
      }
    }
    return s;
  }

  std::string WorkDir(const std::string& cluster) const { return o_.state_dir + "/clusters/" + cluster; }
  absl::StatusOr<Fd> LogDirFd(const std::string& cluster) const {
    RELAY_ASSIGN_OR_RETURN(Fd state, OpenServiceDir(o_.state_dir, 0711));
    RELAY_ASSIGN_OR_RETURN(Fd logs, EnsureDirAt(state, "logs", 0700));
    return EnsureDirAt(logs, cluster, 0700);
  }
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
    std::map<std::string, std::string> env;
    for (char** e = environ; *e; ++e) {
      std::string_view kv(*e);
      auto eq = kv.find('=');
      if (eq != std::string_view::npos && Inherited(kv.substr(0, eq))) {
        env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
      }
    }
    env["HOME"] = WorkDir(cluster.id());  // nothing of the service user's home (~/.ray, credentials)
    for (const auto& [k, v] : labels) env[k] = v;  // the node's own variables win
    env[kOwnerVariable] = o_.owner;
    env[kInstallationVariable] = installation_;
    env["RELAY_CLUSTER_ID"] = cluster.id();
    env["RELAY_TEAM"] = cluster.spec().team();
    std::vector<std::string> env_store;
    for (const auto& [k, v] : env) env_store.push_back(k + "=" + v);
    std::vector<char*> envp, args;
    for (auto& s : env_store) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_store = argv;
    if (Owner ids = Ids(cluster); ids.uid >= 0) {
      // posix_spawn cannot change the uid: setpriv does, then execs the
      // command (same pid). No supplementary groups, no_new_privs (a setuid
      // binary cannot take the privileges back).
      argv_store.insert(argv_store.begin(), {o_.setpriv, "--reuid=" + std::to_string(ids.uid),
                                             "--regid=" + std::to_string(ids.gid), "--clear-groups", "--no-new-privs",
                                             "--"});
    }
    for (auto& s : argv_store) args.push_back(s.data());
    args.push_back(nullptr);

    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    posix_spawn_file_actions_init(&fa);
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    // The service's file, 0600: the node writes it through this descriptor;
    // no other team reads it.
    posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW, 0600);
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
    if (rc != 0) return absl::FailedPreconditionError(absl::StrCat("cannot start ", args[0], ": ", std::strerror(rc)));
    ProcInfo p;
    Spawned s{pid, 0};
    if (ReadProcStat(pid, p)) s.start_ticks = p.start_ticks;
    return s;
  }

  LocalProviderOptions o_;
  std::string installation_;
  std::unique_ptr<OwnerClaim> claim_;
  std::set<int64_t> foreign_logged_;  // other installations' pids, logged once
  int lock_fd_ = -1;
  Children children_;  // what it started, and the exit codes it reaped
  std::map<std::string, Spawned> started_;  // "<cluster>/<job>" -> its process, the last 100,000 jobs
  std::deque<std::string> started_order_;   // oldest first
};

}  // namespace



namespace {

// Single-team mode: the uid jobs run as. As root, a user must be named (a
// job is never root); not as root, none may be (only root changes uids).
absl::Status ResolveRunAs(LocalProviderOptions& o) {
  if (o.run_as.empty()) {
    if (::geteuid() == 0) {
      return absl::FailedPreconditionError(
          "relay-lifecycle runs as root and lifecycle.local.team's jobs would run as root too: set "
          "lifecycle.local.run_as to a non-root user (or isolate teams with lifecycle.local.uid_range, or run the "
          "service as a non-root user)");
    }
    return absl::OkStatus();
  }
  if (::geteuid() != 0) {
    return absl::FailedPreconditionError("lifecycle.local.run_as needs relay-lifecycle to run as root (only root "
                                         "starts processes as another user); unset it to run jobs as the service's user");
  }
  if (::access(o.setpriv.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(o.setpriv + " (util-linux) is needed to run jobs as lifecycle.local.run_as");
  }
  int64_t uid = -1, gid = -1;
  if (passwd* pw = ::getpwnam(o.run_as.c_str())) {
    uid = pw->pw_uid;
    gid = pw->pw_gid;
  } else if (absl::SimpleAtoi(o.run_as, &uid) && uid >= 0) {
    gid = uid;
    if (passwd* by_id = ::getpwuid(static_cast<uid_t>(uid))) gid = by_id->pw_gid;
  } else {
    return absl::InvalidArgumentError("lifecycle.local.run_as '" + o.run_as + "' is neither a user nor a uid");
  }
  if (uid == 0 || gid == 0) {
    return absl::InvalidArgumentError("lifecycle.local.run_as '" + o.run_as + "' is root (uid or gid 0): jobs must "
                                      "not run as root");
  }
  o.run_as_uid = uid;
  o.run_as_gid = gid;
  return absl::OkStatus();
}

}  // namespace

std::string DefaultRuntimeDir() {
  return ::geteuid() == 0 ? "/run/relay-lifecycle" : "/tmp/relay-lifecycle-" + std::to_string(::geteuid());
}

absl::StatusOr<std::unique_ptr<NodeProvider>> NewLocalProvider(LocalProviderOptions options) {
  if (options.runtime_dir.empty()) options.runtime_dir = DefaultRuntimeDir();
  if (options.uid_first > 0) {
    if (::geteuid() != 0) {
      return absl::FailedPreconditionError("lifecycle.local.uid_range needs relay-lifecycle to run as root (it starts "
                                           "each team's processes as that team's uid)");
    }
    if (::access(options.setpriv.c_str(), X_OK) != 0) {
      return absl::FailedPreconditionError(options.setpriv + " (util-linux) is needed to run teams as their uids");
    }
  } else if (options.team.empty()) {
    return absl::InvalidArgumentError("the local provider needs lifecycle.local.team (the one team it runs) or "
                                      "lifecycle.local.uid_range (teams isolated by uid, as root)");
  } else {
    RELAY_RETURN_IF_ERROR(ResolveRunAs(options));
  }
  // The roots the service makes everything under are its own, or it does
  // not start (safe_fs.h): checked now, not at the first cluster.
  RELAY_RETURN_IF_ERROR(OpenServiceDir(options.state_dir, 0711).status());
  // Nodes of another uid find their work dir (HOME) and token file by path.
  if ((options.uid_first > 0 || options.run_as_uid >= 0) && !RunnableByOthers(options.state_dir)) {
    return absl::FailedPreconditionError("lifecycle.state_dir " + options.state_dir + " is not reachable by the uids "
                                         "nodes run as: every directory above it must be searchable by others");
  }
  if (!options.ray_bin.empty()) {
    if (auto st = OpenServiceDir(options.ray_temp_root, 0711); !st.ok()) {
      return absl::FailedPreconditionError("lifecycle.local.ray_temp_root: " + std::string(st.status().message()));
    }
  }
  RELAY_ASSIGN_OR_RETURN(std::string installation, InstallationId(options.state_dir));
  RELAY_ASSIGN_OR_RETURN(std::unique_ptr<OwnerClaim> claim,
                         OwnerClaim::Take(options.runtime_dir, options.owner, installation, options.state_dir));
  log::Info("owner claimed on this host", {{"owner", options.owner}, {"installation", installation},
                                           {"runtime_dir", options.runtime_dir}});
  return std::unique_ptr<NodeProvider>(
      std::make_unique<LocalProvider>(std::move(options), std::move(installation), std::move(claim)));
}

}  // namespace relay::lifecycle
