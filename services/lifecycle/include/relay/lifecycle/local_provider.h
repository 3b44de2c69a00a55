// The `local` provider, the embedded default: nodes and jobs are real
// processes on this machine.
//
// Each node and each job is a session of its own (setsid), so stopping one
// signals the whole session (kill(-sid), then a /proc sweep for members
// that left the process group). Every process carries its owner label in
// its environment:
//   RELAY_OWNED_BY=<owner> RELAY_INSTALLATION=<id> RELAY_CLUSTER_ID=<id>
//   RELAY_NODE_ID=<node> | RELAY_JOB_ID=<job>
// (not RELAY_LIFECYCLE_OWNER: that is the setting, in the controller's own
// environment; the controller's RELAY_* variables are not passed on, and
// the controller's own session is never signalled).
// which children inherit; Inventory reads /proc/<pid>/environ for it, so
// an orphan sweep finds what the relay started even when the controller
// that started it died before recording its pid. A pid is only ever
// trusted together with its start time (/proc/<pid>/stat field 22), so a
// reused pid is never mistaken for a node.
//
// Output goes to <state_dir>/logs/<cluster>/<node or job>.log (0600, in a
// 0700 directory of the service's user: a node writes its log through the
// descriptor it was started with), kept after the cluster is gone (the
// pointers are in the cluster's record). A cluster's work dir is 0700 and
// belongs to the uid its nodes run as; the service never opens a path by
// name inside it, nor inside a Ray temp dir (safe_fs.h: a team could
// plant a symlink there). Nodes and jobs get an environment
// allow list (PATH, LANG, LC_*, TZ; HOME = the work dir; the labels below),
// never the service's own environment.
//
// Kind `ray`: every node is `ray start --block` from `ray_bin` (the suite's
// venv: tools/python/setup-env), head first, workers joined to its GCS
// address, with ports chosen here (Ray's defaults collide between clusters
// on one host). The dashboard binds 127.0.0.1; Ray turns
// --node-ip-address=127.0.0.1 into the host's routable address
// (resolve_ip_for_localhost), so GCS, raylets and agents listen there:
// the token below is what keeps others out and a temp dir of ~30 bytes,
// <ray_temp_root>/<uid>/<cluster> (Ray's socket paths must fit in 107
// bytes; <uid> is the service's, group = the nodes' gid, 0710, so only
// that uid enters it: Ray makes the cluster's dir world-writable). Token
// authentication is on (RAY_AUTH_MODE=token, a random token per cluster
// kept in its record's secrets, handed to the nodes as a 0600 file of
// their uid in <state_dir>/tokens (the service's, 0711) through
// RAY_AUTH_TOKEN_PATH, never in the environment, which /proc shows): the
// dashboard and the Jobs API answer nobody else (the ShadowRay lesson,
// CVE-2023-48022). Readiness: the head's /api/gcs_healthz, each
// worker's agent /api/healthz. Jobs go through the Jobs REST API
// (submission id = the job's id, so a resubmission is recognised); a
// finished job's logs are copied to its log file. Never `ray stop`: it
// kills every Ray process on the host.
#pragma once

#include <memory>
#include <string>

#include "relay/lifecycle/provider.h"

namespace relay::lifecycle {

struct LocalProviderOptions {
  std::string state_dir;                // logs, work dirs and the lock file
  std::string owner = "relay-lifecycle";  // the label; one per relay installation
  std::string ray_bin;                  // `ray` of a venv with ray[default]; empty: no Ray clusters
  // Short: Ray's AF_UNIX paths live under it. The service's own: made 0711
  // if missing, and refused at start when it is a symlink, another user's,
  // or writable by others (lifecycle.local.ray_temp_root).
  std::string ray_temp_root = "/tmp/rr";
  // Where owner names are claimed host-wide (lifecycle.runtime_dir; empty:
  // DefaultRuntimeDir()).
  std::string runtime_dir;
  // Tenants (lifecycle.local.*): never two teams under one uid.
  //  - uid_first..uid_last set (root only): teams are isolated, each team's
  //    nodes and jobs run as a uid of its own from the range (allocated on
  //    first use, kept in <state_dir>/team-uids), through setpriv (no
  //    supplementary groups, no_new_privs);
  //  - otherwise the provider runs one team's clusters, `team`, and refuses
  //    any other's (the kubernetes provider is the multi-tenant one). As
  //    root it runs them as `run_as` (a user name or uid, never 0) and
  //    refuses to start without one: a job is never root.
  std::string team;
  std::string run_as;
  int64_t uid_first = 0, uid_last = 0;
  // Resolved from run_as by NewLocalProvider; -1: the service's own uid.
  int64_t run_as_uid = -1, run_as_gid = -1;
  std::string setpriv = "/usr/bin/setpriv";
};

// An owner label is one installation's on a host. Every relay-lifecycle of
// an installation (the instances sharing one state_dir, so its
// installation id) holds a shared claim on <runtime_dir>/<owner>.lock for
// its lifetime; another installation asking for the same owner while any of
// them lives is refused, naming the installation, its state dir and the
// process that registered it. Two installations that share an owner (a
// copy-pasted config, a staging and a production on one build host) would
// otherwise each kill the other's processes as orphans.
//
// Besides the owner label, every process carries the installation id
// (RELAY_INSTALLATION, a random id kept in <state_dir>/installation-id), and
// the orphan sweep removes only processes of this installation (or with no
// installation label: started before it existed); a labelled process of
// another installation is left alone and logged once.
std::string DefaultRuntimeDir();  // /run/relay-lifecycle as root, else /tmp/relay-lifecycle-<uid>

// Claims the owner and makes the provider; FailedPrecondition when another
// installation holds the owner on this host.
absl::StatusOr<std::unique_ptr<NodeProvider>> NewLocalProvider(LocalProviderOptions options);

// /proc helpers, shared with tests that check the process table.
struct ProcInfo {
  int64_t pid = 0;
  int64_t sid = 0;
  int64_t start_ticks = 0;
  char state = '?';
};
// False when the process does not exist (or is unreadable).
bool ReadProcStat(int64_t pid, ProcInfo& out);
inline constexpr char kOwnerVariable[] = "RELAY_OWNED_BY";
inline constexpr char kInstallationVariable[] = "RELAY_INSTALLATION";
// Processes whose environment has RELAY_OWNED_BY=<owner> and a node or job
// id, zombies and the caller's own session excluded.
struct LabelledProcess {
  ProcInfo proc;
  std::string cluster_id, node_id, job_id;
  std::string installation;  // "" when started before installation labels
};
std::vector<LabelledProcess> FindLabelled(const std::string& owner);

}  // namespace relay::lifecycle
