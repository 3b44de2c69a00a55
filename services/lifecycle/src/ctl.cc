#include "relay/lifecycle/ctl.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

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
#include "relay/v1/lifecycle.grpc.pb.h"

namespace relay::lifecycle {
namespace {

using namespace std::chrono_literals;

// The name the commands are run under: `relay-lifecycle ctl` or `relayctl clusters`.
const char* g_program = "relay-lifecycle ctl";

int Usage(const std::string& why) {
  std::cerr << g_program << ": " << why << "\n"
            << "usage: " << g_program << " [--addr HOST:PORT] [--token-file F] [--ca F [--cert F --key F]] COMMAND\n"
            << "  create --spec JSON|@FILE [--request-id ID]\n"
            << "  get ID | list [--team T] [--state S] [--all] | delete ID | scale ID GROUP COUNT\n"
            << "  submit ID [--request-id ID] -- ENTRYPOINT... | job ID JOB | jobs ID | cancel ID JOB\n"
            << "  watch ID | wait ID STATE [--timeout S] | wait-job ID JOB [--timeout S]\n"
            << "(LIFECYCLE_GRPC and LIFECYCLE_TOKEN stand in for --addr and the token)\n";
  return 2;
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
  std::cerr << g_program << ": " << absl::StatusCodeToString(static_cast<absl::StatusCode>(st.error_code()))
            << ": " << st.error_message() << "\n";
  return 1;
}

struct Flags {
  std::map<std::string, std::string> named;
  std::vector<std::string> positional;
  std::vector<std::string> rest;  // after --
};

bool ParseFlags(int argc, char** argv, Flags& f, std::string& why) {
  static const std::map<std::string, bool> kTakesValue = {
      {"--addr", true}, {"--token-file", true}, {"--ca", true}, {"--cert", true}, {"--key", true},
      {"--spec", true}, {"--request-id", true}, {"--team", true}, {"--state", true}, {"--timeout", true},
      {"--all", false}};
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") {
      for (++i; i < argc; ++i) f.rest.push_back(argv[i]);
      break;
    }
    auto it = kTakesValue.find(a);
    if (it != kTakesValue.end()) {
      if (it->second) {
        if (i + 1 >= argc) return why = a + " needs a value", false;
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

}  // namespace

int CtlMain(int argc, char** argv, const char* program) {
  g_program = program;
  Flags f;
  std::string why;
  if (!ParseFlags(argc, argv, f, why)) return Usage(why);
  if (f.positional.empty()) return Usage("no command");
  std::string addr = f.named.count("--addr") ? f.named["--addr"] : (std::getenv("LIFECYCLE_GRPC") ? std::getenv("LIFECYCLE_GRPC") : "");
  if (addr.empty()) return Usage("no address: --addr or LIFECYCLE_GRPC");
  std::string token = f.named.count("--token-file") ? ReadFile(f.named["--token-file"])
                                                     : (std::getenv("LIFECYCLE_TOKEN") ? std::getenv("LIFECYCLE_TOKEN") : "");
  token = std::string(absl::StripAsciiWhitespace(token));
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (f.named.count("--ca")) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(f.named["--ca"]);
    if (f.named.count("--cert")) {
      ssl.pem_cert_chain = ReadFile(f.named["--cert"]);
      ssl.pem_private_key = ReadFile(f.named["--key"]);
    }
    creds = grpc::SslCredentials(ssl);
  }
  auto stub = v1::LifecycleApi::NewStub(grpc::CreateChannel(addr, creds));
  auto context = [&](std::chrono::milliseconds timeout) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    if (!token.empty()) ctx->AddMetadata("authorization", "Bearer " + token);
    ctx->set_deadline(std::chrono::system_clock::now() + timeout);
    return ctx;
  };
  double timeout_s = 120;
  if (f.named.count("--timeout") && !absl::SimpleAtod(f.named["--timeout"], &timeout_s)) return Usage("--timeout needs seconds");
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
  const std::string cmd = f.positional[0];
  const std::vector<std::string> args(f.positional.begin() + 1, f.positional.end());
  auto need = [&](size_t n) { return args.size() == n; };

  if (cmd == "create") {
    if (!f.named.count("--spec") || !need(0)) return Usage("create --spec JSON|@FILE");
    std::string spec = f.named["--spec"];
    if (!spec.empty() && spec[0] == '@') spec = ReadFile(spec.substr(1));
    v1::CreateClusterRequest req;
    if (auto st = google::protobuf::util::JsonStringToMessage(spec, req.mutable_spec()); !st.ok()) {
      return Usage("--spec is not a ClusterSpec: " + std::string(st.message()));
    }
    req.set_request_id(f.named["--request-id"]);
    v1::Cluster out;
    auto st = stub->CreateCluster(context(30s).get(), req, &out);
    if (!st.ok()) return Failed(st);
    std::cout << Json(out) << "\n";
    return 0;
  }
  if (cmd == "get" && need(1)) {
    v1::GetClusterRequest req;
    req.set_id(args[0]);
    v1::Cluster out;
    auto st = stub->GetCluster(context(30s).get(), req, &out);
    if (!st.ok()) return Failed(st);
    std::cout << Json(out) << "\n";
    return 0;
  }
  if (cmd == "list" && need(0)) {
    v1::ListClustersRequest req;
    req.set_team(f.named["--team"]);
    req.set_state(f.named["--state"]);
    req.set_include_ended(f.named.count("--all") > 0);
    v1::ListClustersResponse out;
    auto st = stub->ListClusters(context(30s).get(), req, &out);
    if (!st.ok()) return Failed(st);
    for (const auto& c : out.clusters()) {
      std::cout << c.id() << "\t" << c.spec().team() << "\t" << c.state() << "\t" << c.nodes_size() << " nodes\t"
                << c.jobs_size() << " jobs\t" << c.reason() << "\n";
    }
    return 0;
  }
  if (cmd == "delete" && need(1)) {
    v1::DeleteClusterRequest req;
    req.set_id(args[0]);
    v1::Cluster out;
    auto st = stub->DeleteCluster(context(30s).get(), req, &out);
    if (!st.ok()) return Failed(st);
    std::cout << Json(out) << "\n";
    return 0;
  }
  if (cmd == "scale" && need(3)) {
    v1::ScaleClusterRequest req;
    req.set_id(args[0]);
    req.set_node_group(args[1]);
    int n;
    if (!absl::SimpleAtoi(args[2], &n)) return Usage("scale ID GROUP COUNT");
    req.set_count(n);
    v1::Cluster out;
    auto st = stub->ScaleCluster(context(30s).get(), req, &out);
    if (!st.ok()) return Failed(st);
    std::cout << Json(out) << "\n";
    return 0;
  }
  if (cmd == "submit" && need(1)) {
    if (f.rest.empty()) return Usage("submit ID -- ENTRYPOINT...");
    v1::SubmitJobRequest req;
    req.set_cluster_id(args[0]);
    std::string entry;
    for (const auto& w : f.rest) entry += (entry.empty() ? "" : " ") + w;
    req.set_entrypoint(entry);
    req.set_request_id(f.named["--request-id"]);
    v1::Job out;
    auto st = stub->SubmitJob(context(30s).get(), req, &out);
    if (!st.ok()) return Failed(st);
    std::cout << Json(out) << "\n";
    return 0;
  }
  if ((cmd == "job" || cmd == "cancel") && need(2)) {
    v1::Job out;
    grpc::Status st;
    if (cmd == "job") {
      v1::GetJobRequest req;
      req.set_cluster_id(args[0]);
      req.set_job_id(args[1]);
      st = stub->GetJob(context(30s).get(), req, &out);
    } else {
      v1::CancelJobRequest req;
      req.set_cluster_id(args[0]);
      req.set_job_id(args[1]);
      st = stub->CancelJob(context(30s).get(), req, &out);
    }
    if (!st.ok()) return Failed(st);
    std::cout << Json(out) << "\n";
    return 0;
  }
  if (cmd == "jobs" && need(1)) {
    v1::ListJobsRequest req;
    req.set_cluster_id(args[0]);
    v1::ListJobsResponse out;
    auto st = stub->ListJobs(context(30s).get(), req, &out);
    if (!st.ok()) return Failed(st);
    for (const auto& j : out.jobs()) std::cout << j.id() << "\t" << j.state() << "\t" << j.exit_code() << "\t" << j.entrypoint() << "\n";
    return 0;
  }
  if ((cmd == "watch" && need(1)) || (cmd == "wait" && need(2))) {
    v1::WatchClusterRequest req;
    req.set_id(args[0]);
    auto ctx = context(cmd == "watch" ? std::chrono::milliseconds(24h) : timeout);
    auto reader = stub->WatchCluster(ctx.get(), req);
    v1::Cluster c;
    while (reader->Read(&c)) {
      if (cmd == "watch") {
        std::cout << Json(c) << std::endl;
      } else if (c.state() == args[1]) {
        std::cout << c.id() << " " << c.state() << "\n";
        ctx->TryCancel();
        reader->Finish();
        return 0;
      }
    }
    auto st = reader->Finish();
    if (cmd == "watch" && st.ok()) return 0;
    if (st.ok()) {
      std::cerr << "relay-lifecycle ctl: cluster " << args[0] << " ended " << c.state() << " (" << c.reason() << "), never " << args[1] << "\n";
      return 1;
    }
    return Failed(st);
  }
  if (cmd == "wait-job" && need(2)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      v1::GetJobRequest req;
      req.set_cluster_id(args[0]);
      req.set_job_id(args[1]);
      v1::Job out;
      auto st = stub->GetJob(context(30s).get(), req, &out);
      if (!st.ok()) return Failed(st);
      if (out.state() != "PENDING" && out.state() != "RUNNING") {
        std::cout << Json(out) << "\n";
        return out.state() == "SUCCEEDED" ? 0 : 1;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        std::cerr << "relay-lifecycle ctl: job " << args[1] << " still " << out.state() << "\n";
        return 1;
      }
      std::this_thread::sleep_for(200ms);
    }
  }
  return Usage("unknown command or wrong arguments: " + cmd);
}

}  // namespace relay::lifecycle
