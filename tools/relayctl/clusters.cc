// relayctl clusters: relay-lifecycle's API (relay.v1.LifecycleApi) from a
// shell, with a token, through the service's client
// (relay/lifecycle/client.h).
//
//   create --spec JSON|@FILE [--request-id ID]     prints the cluster (JSON)
//   get ID | list [--team T] [--state S] [--all] | delete ID
//   scale ID GROUP COUNT
//   submit ID [--request-id ID] -- ENTRYPOINT...   prints the job
//   job ID JOB | jobs ID | cancel ID JOB
//   watch ID                                       one JSON line per change until it ends
//   wait ID STATE [--timeout SECONDS]              until the cluster is in STATE
//   wait-job ID JOB [--timeout SECONDS]            until the job ends; exit 0 only if it SUCCEEDED
//
// Exit codes: 0 ok, 1 the call failed (the gRPC status is printed), 2 usage.
#include <google/protobuf/util/json_util.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "relay/lifecycle/client.h"
#include "relayctl.h"

namespace relay::relayctl {
namespace {

using namespace std::chrono_literals;

constexpr char kProgram[] = "relayctl clusters";

int Usage(const std::string& why) {
  std::cerr << kProgram << ": " << why << "\n"
            << "usage: " << kProgram << " [--addr HOST:PORT] [--token-file F] [--ca F [--cert F --key F]] COMMAND\n"
            << "  create --spec JSON|@FILE [--request-id ID]\n"
            << "  get ID | list [--team T] [--state S] [--all] | delete ID | scale ID GROUP COUNT\n"
            << "  submit ID [--request-id ID] -- ENTRYPOINT... | job ID JOB | jobs ID | cancel ID JOB\n"
            << "  watch ID | wait ID STATE [--timeout S] | wait-job ID JOB [--timeout S]\n"
            << "(LIFECYCLE_GRPC and LIFECYCLE_TOKEN stand in for --addr and the token)\n";
  return kBadInput;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

int Failed(const grpc::Status& st) {
  // gRPC's codes are absl's, number for number: print the name.
  std::cerr << kProgram << ": " << absl::StatusCodeToString(static_cast<absl::StatusCode>(st.error_code()))
            << ": " << st.error_message() << "\n";
  return kFailed;
}

// A call that answers one message: the message as JSON, or the failure.
int PrintResult(const grpc::Status& st, const google::protobuf::Message& out) {
  if (!st.ok()) return Failed(st);
  std::cout << Json(out) << "\n";
  return kOk;
}

// The command line of `clusters` (its own grammar: everything after `--`
// is the entrypoint of `submit`).
struct ClusterArgs {
  std::map<std::string, std::string> named;
  std::vector<std::string> positional;
  std::vector<std::string> rest;  // after --

  bool Has(const std::string& name) const { return named.count(name) > 0; }
  std::string Get(const std::string& name) const {
    auto it = named.find(name);
    return it == named.end() ? "" : it->second;
  }
};

bool ParseArgs(const std::vector<std::string>& argv, ClusterArgs& f, std::string& why) {
  static const std::map<std::string, bool> kTakesValue = {
      {"--addr", true}, {"--token-file", true}, {"--ca", true}, {"--cert", true}, {"--key", true},
      {"--spec", true}, {"--request-id", true}, {"--team", true}, {"--state", true}, {"--timeout", true},
      {"--all", false}};
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a == "--") {
      for (++i; i < argv.size(); ++i) f.rest.push_back(argv[i]);
      break;
    }
    auto it = kTakesValue.find(a);
    if (it != kTakesValue.end()) {
      if (it->second) {
        if (i + 1 >= argv.size()) return why = a + " needs a value", false;
        f.named[a] = argv[++i];
      } else {
        f.named[a] = "1";
      }
    } else if (a.size() > 1 && a[0] == '-' && a[1] == '-') {
      return why = "unknown flag " + a, false;
    } else {
      f.positional.push_back(a);
    }
  }
  return true;
}

// Where the API is and who calls it: --addr (or LIFECYCLE_GRPC), the token
// from --token-file (or LIFECYCLE_TOKEN), TLS from --ca [--cert --key].
bool ReadClientOptions(const ClusterArgs& f, lifecycle::ClientOptions& o, std::string& why) {
  const char* addr_env = std::getenv("LIFECYCLE_GRPC");
  o.address = f.Has("--addr") ? f.Get("--addr") : (addr_env ? addr_env : "");
  if (o.address.empty()) return why = "no address: --addr or LIFECYCLE_GRPC", false;
  const char* token_env = std::getenv("LIFECYCLE_TOKEN");
  std::string token = f.Has("--token-file") ? ReadFile(f.Get("--token-file")) : (token_env ? token_env : "");
  o.token = std::string(absl::StripAsciiWhitespace(token));
  if (f.Has("--ca")) {
    o.tls = true;
    o.ca_pem = ReadFile(f.Get("--ca"));
    if (f.Has("--cert")) {
      o.cert_pem = ReadFile(f.Get("--cert"));
      o.key_pem = ReadFile(f.Get("--key"));
    }
  }
  return true;
}

// One command's inputs: its arguments (after its name), the flags, the
// client, and how long `wait` and `wait-job` wait.
struct Command {
  const ClusterArgs& f;
  std::vector<std::string> args;
  lifecycle::LifecycleClient& client;
  std::chrono::milliseconds timeout;

  v1::LifecycleApi::Stub& api() const { return client.api(); }
  std::unique_ptr<grpc::ClientContext> Call() const { return client.Context(30s); }
};

int Create(const Command& c) {
  if (!c.f.Has("--spec") || !c.args.empty()) return Usage("create --spec JSON|@FILE");
  std::string spec = c.f.Get("--spec");
  if (!spec.empty() && spec[0] == '@') spec = ReadFile(spec.substr(1));
  v1::CreateClusterRequest req;
  if (auto st = google::protobuf::util::JsonStringToMessage(spec, req.mutable_spec()); !st.ok()) {
    return Usage("--spec is not a ClusterSpec: " + std::string(st.message()));
  }
  req.set_request_id(c.f.Get("--request-id"));
  v1::Cluster out;
  return PrintResult(c.api().CreateCluster(c.Call().get(), req, &out), out);
}

int Get(const Command& c) {
  v1::GetClusterRequest req;
  req.set_id(c.args[0]);
  v1::Cluster out;
  return PrintResult(c.api().GetCluster(c.Call().get(), req, &out), out);
}

int List(const Command& c) {
  v1::ListClustersRequest req;
  req.set_team(c.f.Get("--team"));
  req.set_state(c.f.Get("--state"));
  req.set_include_ended(c.f.Has("--all"));
  v1::ListClustersResponse out;
  auto st = c.api().ListClusters(c.Call().get(), req, &out);
  if (!st.ok()) return Failed(st);
  for (const auto& cl : out.clusters()) {
    std::cout << cl.id() << "\t" << cl.spec().team() << "\t" << cl.state() << "\t" << cl.nodes_size() << " nodes\t"
              << cl.jobs_size() << " jobs\t" << cl.reason() << "\n";
  }
  return kOk;
}

int Delete(const Command& c) {
  v1::DeleteClusterRequest req;
  req.set_id(c.args[0]);
  v1::Cluster out;
  return PrintResult(c.api().DeleteCluster(c.Call().get(), req, &out), out);
}

int Scale(const Command& c) {
  v1::ScaleClusterRequest req;
  req.set_id(c.args[0]);
  req.set_node_group(c.args[1]);
  int n;
  if (!absl::SimpleAtoi(c.args[2], &n)) return Usage("scale ID GROUP COUNT");
  req.set_count(n);
  v1::Cluster out;
  return PrintResult(c.api().ScaleCluster(c.Call().get(), req, &out), out);
}

int Submit(const Command& c) {
  if (c.f.rest.empty()) return Usage("submit ID -- ENTRYPOINT...");
  v1::SubmitJobRequest req;
  req.set_cluster_id(c.args[0]);
  std::string entry;
  for (const auto& w : c.f.rest) entry += (entry.empty() ? "" : " ") + w;
  req.set_entrypoint(entry);
  req.set_request_id(c.f.Get("--request-id"));
  v1::Job out;
  return PrintResult(c.api().SubmitJob(c.Call().get(), req, &out), out);
}

int Job(const Command& c) {
  v1::GetJobRequest req;
  req.set_cluster_id(c.args[0]);
  req.set_job_id(c.args[1]);
  v1::Job out;
  return PrintResult(c.api().GetJob(c.Call().get(), req, &out), out);
}

int Cancel(const Command& c) {
  v1::CancelJobRequest req;
  req.set_cluster_id(c.args[0]);
  req.set_job_id(c.args[1]);
  v1::Job out;
  return PrintResult(c.api().CancelJob(c.Call().get(), req, &out), out);
}

int Jobs(const Command& c) {
  v1::ListJobsRequest req;
  req.set_cluster_id(c.args[0]);
  v1::ListJobsResponse out;
  auto st = c.api().ListJobs(c.Call().get(), req, &out);
  if (!st.ok()) return Failed(st);
  for (const auto& j : out.jobs()) std::cout << j.id() << "\t" << j.state() << "\t" << j.exit_code() << "\t" << j.entrypoint() << "\n";
  return kOk;
}

// One JSON line per change of the cluster until its stream ends (a day at
// most).
int Watch(const Command& c) {
  v1::WatchClusterRequest req;
  req.set_id(c.args[0]);
  auto ctx = c.client.Context(24h);
  auto reader = c.api().WatchCluster(ctx.get(), req);
  v1::Cluster cl;
  while (reader->Read(&cl)) std::cout << Json(cl) << std::endl;
  auto st = reader->Finish();
  if (st.ok()) return kOk;
  return Failed(st);
}

// Until the cluster is in the state asked for; a cluster that ends first
// fails.
int Wait(const Command& c) {
  const std::string& id = c.args[0];
  const std::string& state = c.args[1];
  v1::WatchClusterRequest req;
  req.set_id(id);
  auto ctx = c.client.Context(c.timeout);
  auto reader = c.api().WatchCluster(ctx.get(), req);
  v1::Cluster cl;
  while (reader->Read(&cl)) {
    if (cl.state() == state) {
      std::cout << cl.id() << " " << cl.state() << "\n";
      ctx->TryCancel();
      reader->Finish();
      return kOk;
    }
  }
  auto st = reader->Finish();
  if (st.ok()) {
    std::cerr << kProgram << ": cluster " << id << " ended " << cl.state() << " (" << cl.reason() << "), never "
              << state << "\n";
    return kFailed;
  }
  return Failed(st);
}

// Polls the job until it ends: exit 0 only if it SUCCEEDED.
int WaitJob(const Command& c) {
  auto deadline = std::chrono::steady_clock::now() + c.timeout;
  while (true) {
    v1::GetJobRequest req;
    req.set_cluster_id(c.args[0]);
    req.set_job_id(c.args[1]);
    v1::Job out;
    auto st = c.api().GetJob(c.Call().get(), req, &out);
    if (!st.ok()) return Failed(st);
    if (out.state() != "PENDING" && out.state() != "RUNNING") {
      std::cout << Json(out) << "\n";
      return out.state() == "SUCCEEDED" ? kOk : kFailed;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::cerr << kProgram << ": job " << c.args[1] << " still " << out.state() << "\n";
      return kFailed;
    }
    std::this_thread::sleep_for(200ms);
  }
}

// The command by its name and number of arguments.
int Run(const std::string& cmd, const Command& c) {
  auto need = [&](size_t n) { return c.args.size() == n; };
  if (cmd == "create") return Create(c);
  if (cmd == "get" && need(1)) return Get(c);
  if (cmd == "list" && need(0)) return List(c);
  if (cmd == "delete" && need(1)) return Delete(c);
  if (cmd == "scale" && need(3)) return Scale(c);
  if (cmd == "submit" && need(1)) return Submit(c);
  if (cmd == "job" && need(2)) return Job(c);
  if (cmd == "cancel" && need(2)) return Cancel(c);
  if (cmd == "jobs" && need(1)) return Jobs(c);
  if (cmd == "watch" && need(1)) return Watch(c);
  if (cmd == "wait" && need(2)) return Wait(c);
  if (cmd == "wait-job" && need(2)) return WaitJob(c);
  return Usage("unknown command or wrong arguments: " + cmd);
}

}  // namespace

int Clusters(const std::vector<std::string>& args) {
  ClusterArgs f;
  std::string why;
  if (!ParseArgs(args, f, why)) return Usage(why);
  if (f.positional.empty()) return Usage("no command");
  lifecycle::ClientOptions options;
  if (!ReadClientOptions(f, options, why)) return Usage(why);
  lifecycle::LifecycleClient client(options);
  double timeout_s = 120;
  if (f.Has("--timeout") && !absl::SimpleAtod(f.Get("--timeout"), &timeout_s)) return Usage("--timeout needs seconds");
  const Command command{f, {f.positional.begin() + 1, f.positional.end()}, client,
                        std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000))};
  return Run(f.positional[0], command);
}

}  // namespace relay::relayctl
