// relay-lifecycle on the real broker with the local provider: real
// processes, checked against the OS process table. Each test has its own
// owner label, state topic, leader topic and consumer group, so tests that
// share the broker (and the machine) never see each other's clusters.
#include "lifecycle_it_support.h"

namespace relay {
namespace {

using namespace lifecycle_it;

// ------------------------------------------------------------------ tests

// Every RPC, found through reflection, refused without credentials, with
// bad ones, and (issue 15) with valid OIDC tokens of callers no allow rule
// admits: GitHub's issuer signs a token for any repository with whatever
// audience its workflow asks for, so evil-org/anything and ml/anything
// (named like the team ml) carry the configured audience and a good
// signature, and are still refused.
TEST(LifecycleIt, EveryRpcWithoutCredentialsOrAnAllowRuleIsRefused) {
  LifecycleStack stack("auth");
  auto [oidc_priv, oidc_pub] = testing::NewRsaKeyPairPem();
  auth::RsaKey oidc_key = *auth::RsaKey::FromPem(oidc_priv);
  std::ofstream(stack.dir() + "/jwks.json")
      << boost::json::serialize(boost::json::object{{"keys", boost::json::array{*auth::ToJwk(oidc_key, "k1")}}});
  auto oidc_token = [&](const std::string& repo) {
    int64_t now = SystemClock().UnixMillis() / 1000;
    boost::json::object claims{{"iss", "https://token.actions.githubusercontent.com"}, {"aud", "relay-lifecycle-it"},
                               {"repository", repo}, {"repository_owner", repo.substr(0, repo.find('/'))},
                               {"iat", now}, {"nbf", now}, {"exp", now + 600}};
    return *auth::SignRs256(claims, oidc_key, "k1");
  };
  std::map<std::string, std::string> oidc_env = {{"RELAY_LIFECYCLE_OIDC_AUDIENCE", "relay-lifecycle-it"},
                                                 {"RELAY_LIFECYCLE_OIDC_JWKS_FILE", stack.dir() + "/jwks.json"}};
  // OIDC on without an allow list: refused at start.
  auto no_allow = oidc_env;
  ASSERT_EQ(stack.Start(1, no_allow), 0);
  EXPECT_EQ(stack.proc(1).Wait(10s), 2);
  EXPECT_NE(stack.Log(1).find("lifecycle.oidc.allow"), std::string::npos) << stack.Log(1);
  oidc_env["RELAY_LIFECYCLE_OIDC_ALLOW"] = "ml-org=ml";
  ASSERT_NE(stack.Start(1, oidc_env), 0) << stack.Log(1);
  ASSERT_TRUE(stack.WaitLeading(1)) << stack.Log(1);
  auto channel = grpc::CreateChannel(stack.GrpcAddress(1), grpc::InsecureChannelCredentials());

  // The methods, from the server's own reflection service.
  auto reflection = grpc::reflection::v1alpha::ServerReflection::NewStub(channel);
  grpc::ClientContext rctx;
  auto stream = reflection->ServerReflectionInfo(&rctx);
  grpc::reflection::v1alpha::ServerReflectionRequest list;
  list.set_list_services("*");
  ASSERT_TRUE(stream->Write(list));
  grpc::reflection::v1alpha::ServerReflectionResponse listed;
  ASSERT_TRUE(stream->Read(&listed));
  std::set<std::string> services;
  for (const auto& s : listed.list_services_response().service()) services.insert(s.name());
  EXPECT_TRUE(services.count("relay.v1.LifecycleApi"));
  EXPECT_TRUE(services.count("grpc.health.v1.Health"));
  std::vector<std::string> methods;
  for (const std::string& service : services) {
    if (service.rfind("relay.", 0) != 0) continue;  // relay's services; health and reflection are open by design
    grpc::reflection::v1alpha::ServerReflectionRequest file;
    file.set_file_containing_symbol(service);
    ASSERT_TRUE(stream->Write(file));
    grpc::reflection::v1alpha::ServerReflectionResponse got;
    ASSERT_TRUE(stream->Read(&got));
    for (const auto& bytes : got.file_descriptor_response().file_descriptor_proto()) {
      google::protobuf::FileDescriptorProto fd;
      ASSERT_TRUE(fd.ParseFromString(bytes));
      for (const auto& s : fd.service()) {
        if (fd.package() + "." + s.name() != service) continue;
        for (const auto& m : s.method()) methods.push_back("/" + service + "/" + m.name());
      }
    }
  }
  stream->WritesDone();
  stream->Finish();
  // The server lists what this build compiled: every method, none hidden.
  const auto* compiled = v1::Cluster::descriptor()->file()->FindServiceByName("LifecycleApi");
  ASSERT_NE(compiled, nullptr);
  ASSERT_EQ(methods.size(), static_cast<size_t>(compiled->method_count()));
  ASSERT_GE(methods.size(), 10u);

  // Each one, called with no credentials, with a wrong token and with
  // tokens no rule admits, with an empty request: refused before the
  // request is looked at.
  grpc::GenericStub generic(channel);
  grpc::CompletionQueue cq;
  const std::string evil = oidc_token("evil-org/anything"), team_named = oidc_token("ml/anything");
  for (const std::string& method : methods) {
    for (const std::string& token :
         std::vector<std::string>{"", "not-a-token", std::string(kMlToken) + "x", evil, team_named}) {
      grpc::ClientContext ctx;
      if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
      ctx.set_deadline(std::chrono::system_clock::now() + 10s);
      grpc::ByteBuffer request, response;
      grpc::Slice empty("");
      request = grpc::ByteBuffer(&empty, 1);
      auto call = generic.PrepareUnaryCall(&ctx, method, request, &cq);
      call->StartCall();
      grpc::Status status;
      call->Finish(&response, &status, reinterpret_cast<void*>(1));
      void* tag;
      bool ok;
      ASSERT_TRUE(cq.Next(&tag, &ok));
      bool valid_oidc = token == evil || token == team_named;
      EXPECT_EQ(status.error_code(),
                valid_oidc ? grpc::StatusCode::PERMISSION_DENIED : grpc::StatusCode::UNAUTHENTICATED)
          << method << " token='" << token.substr(0, 20) << "'";
    }
  }
  cq.Shutdown();
  EXPECT_NE(stack.Log(1).find("OIDC caller evil-org/anything is not admitted"), std::string::npos);
  EXPECT_NE(stack.Log(1).find("OIDC caller ml/anything is not admitted"), std::string::npos);
  // Nothing was created.
  auto stub = stack.Stub(1);
  v1::ListClustersRequest all;
  all.set_include_ended(true);
  v1::ListClustersResponse listed_clusters;
  ASSERT_TRUE(stub->ListClusters(As(kAdminToken).get(), all, &listed_clusters).ok());
  EXPECT_EQ(listed_clusters.clusters_size(), 0);
  // An admitted repository acts as the rule's team, and only it.
  v1::Cluster created;
  auto admitted = oidc_token("ml-org/trainer");
  ASSERT_TRUE(stub->CreateCluster(As(admitted).get(), CommandCluster(1, "oidc-1"), &created).ok());
  EXPECT_EQ(created.spec().team(), "ml");
  EXPECT_EQ(GetCluster(*stub, kMlToken, created.id()).id(), created.id()) << "team ml's token sees it";
  v1::GetClusterRequest get;
  get.set_id(created.id());
  v1::Cluster seen;
  EXPECT_EQ(stub->GetCluster(As(team_named).get(), get, &seen).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  v1::DeleteClusterRequest del;
  del.set_id(created.id());
  v1::Cluster deleted;
  EXPECT_EQ(stub->DeleteCluster(As(team_named).get(), del, &deleted).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  ASSERT_TRUE(stub->DeleteCluster(As(admitted).get(), del, &deleted).ok());
}

// Issue 19: two lifecycle installations on one host, each with its own
// state dir. With the same owner the second refuses to start, naming the
// first; with different owners both run clusters and neither sweep touches
// the other's processes. And a process labelled with our owner by another
// installation (one that ran before this one claimed the name) is left
// alone, logged once.
TEST(LifecycleIt, TwoInstallationsOnOneHostNeverSweepEachOther) {
  LifecycleStack a("host-a");
  ASSERT_NE(a.Start(1), 0) << a.Log(1);
  ASSERT_TRUE(a.WaitLeading(1)) << a.Log(1);
  auto stub_a = a.Stub(1);
  v1::Cluster ca;
  ASSERT_TRUE(stub_a->CreateCluster(As(kMlToken).get(), CommandCluster(2, "host-a"), &ca).ok());
  ASSERT_EQ(WaitState(*stub_a, kMlToken, ca.id(), {"IDLE", "FAILED"}), "IDLE") << a.Log(1);

  // Same owner, another installation: refused at start.
  LifecycleStack b("host-b", a.owner());
  EXPECT_EQ(b.Start(1), 0);
  EXPECT_EQ(b.proc(1).Wait(10s), 1);
  EXPECT_NE(b.Log(1).find("is claimed on this host by another relay-lifecycle installation"), std::string::npos)
      << b.Log(1);
  EXPECT_NE(b.Log(1).find(a.dir() + "/state"), std::string::npos) << "the error names the other installation";

  // Another owner: both run, neither sweeps the other (sweeps every second).
  LifecycleStack c("host-c");
  ASSERT_NE(c.Start(1), 0) << c.Log(1);
  ASSERT_TRUE(c.WaitLeading(1)) << c.Log(1);
  auto stub_c = c.Stub(1);
  v1::Cluster cc;
  ASSERT_TRUE(stub_c->CreateCluster(As(kMlToken).get(), CommandCluster(2, "host-c"), &cc).ok());
  ASSERT_EQ(WaitState(*stub_c, kMlToken, cc.id(), {"IDLE", "FAILED"}), "IDLE") << c.Log(1);
  auto sessions_a = NodeSessions(a.owner(), ca.id());
  auto sessions_c = NodeSessions(c.owner(), cc.id());
  std::this_thread::sleep_for(4s);
  EXPECT_EQ(NodeSessions(a.owner(), ca.id()), sessions_a);
  EXPECT_EQ(NodeSessions(c.owner(), cc.id()), sessions_c);
  EXPECT_EQ(GetCluster(*stub_a, kMlToken, ca.id()).state(), "IDLE");
  EXPECT_EQ(GetCluster(*stub_c, kMlToken, cc.id()).state(), "IDLE");

  // A dies (its nodes live on); B may now claim the owner, and its sweep
  // leaves A's processes alone: they are another installation's.
  a.proc(1).Signal(SIGKILL);
  a.proc(1).Wait(10s);
  ASSERT_NE(b.Start(2), 0) << b.Log(2);
  ASSERT_TRUE(b.WaitLeading(2)) << b.Log(2);
  // Its sweeps (every second) have seen each of A's processes: polled, as a
  // slow machine may take longer than a few seconds to get there.
  auto logged_by_b = [&] {
    std::string log = b.Log(2);
    size_t n = 0;
    for (size_t at = 0; (at = log.find("belongs to another installation", at)) != std::string::npos; ++at) ++n;
    return n;
  };
  std::this_thread::sleep_for(4s);
  EXPECT_TRUE(relay::testing::WaitFor([&] { return logged_by_b() >= sessions_a.size(); }, 30s, 200ms))
      << b.Log(2);
  EXPECT_EQ(NodeSessions(a.owner(), ca.id()), sessions_a) << "B's sweep killed A's processes";
  size_t logged = logged_by_b();
  EXPECT_LE(logged, 2 * sessions_a.size() + 2) << "logged once per process, not every sweep";
}

// Issue 15, item 2: teams on the local provider, isolated by uid (as root:
// CI runs as root). A job of team ml tries, as an attacker would, to read
// team vision's files, logs and environment and to signal its processes,
// and fails at each; the same job can do all of it to its own team's node,
// so the test fails if both teams ran under one uid.
TEST(LifecycleIt, TeamsIsolatedByUidCannotReadOrSignalEachOther) {
  if (::geteuid() != 0) GTEST_SKIP() << "uid isolation needs root (CI runs as root)";
  LifecycleStack stack("tenants");
  ASSERT_NE(stack.Start(1, {{"RELAY_LIFECYCLE_LOCAL_TEAM", ""},
                            {"RELAY_LIFECYCLE_LOCAL_RUN_AS", ""},
                            {"RELAY_LIFECYCLE_LOCAL_UID_RANGE", "61000-61099"}}),
            0)
      << stack.Log(1);
  ASSERT_TRUE(stack.WaitLeading(1)) << stack.Log(1);
  auto stub = stack.Stub(1);
  auto start = [&](const char* token, const std::string& request, const std::vector<std::string>& argv) {
    v1::CreateClusterRequest r = CommandCluster(1, request);
    auto* g = r.mutable_spec()->mutable_node_groups(0);
    g->clear_command();
    for (const auto& a : argv) g->add_command(a);
    v1::Cluster c;
    EXPECT_TRUE(stub->CreateCluster(As(token).get(), r, &c).ok());
    EXPECT_EQ(WaitState(*stub, token, c.id(), {"IDLE", "FAILED"}), "IDLE") << stack.Log(1);
    return GetCluster(*stub, token, c.id());
  };
  v1::Cluster vision = start(kVisionToken, "victim", {"sh", "-c", "echo vision-secret > secret.txt; exec sleep 600"});
  v1::Cluster ml = start(kMlToken, "attacker", {"sleep", "600"});
  ASSERT_EQ(vision.nodes_size(), 1);
  ASSERT_EQ(ml.nodes_size(), 1);
  int64_t victim = vision.nodes(0).pid(), own = ml.nodes(0).pid();
  auto uid_of = [](int64_t pid) {
    std::string status = ReadFile("/proc/" + std::to_string(pid) + "/status");
    auto at = status.find("\nUid:\t");
    return at == std::string::npos ? -1 : std::atoll(status.c_str() + at + 6);
  };
  EXPECT_GE(uid_of(victim), 61000);
  EXPECT_GE(uid_of(own), 61000);
  EXPECT_NE(uid_of(victim), uid_of(own));
  std::string state = stack.dir() + "/state";
  std::string script = "V=" + state + "/clusters/" + vision.id() + " L=" + state + "/logs/" + vision.id() +
                       " P=" + std::to_string(victim) + " M=" + std::to_string(own) + R"(
fail=0
cat "$V/secret.txt" && { echo ATTACK: read vision file; fail=1; }
ls "$V" >/dev/null 2>&1 && { echo ATTACK: listed vision work dir; fail=1; }
cat "$L"/*.log >/dev/null 2>&1 && { echo ATTACK: read vision logs; fail=1; }
cat /proc/$P/environ >/dev/null 2>&1 && { echo ATTACK: read vision environment; fail=1; }
kill -0 $P 2>/dev/null && { echo ATTACK: can signal vision node; fail=1; }
cat /proc/$M/environ >/dev/null || { echo CONTROL: cannot read own node environment; fail=1; }
kill -0 $M || { echo CONTROL: cannot signal own node; fail=1; }
echo mine > own.txt || { echo CONTROL: cannot write own work dir; fail=1; }
echo done; exit $fail)";
  v1::SubmitJobRequest req;
  req.set_cluster_id(ml.id());
  req.set_entrypoint(script);
  v1::Job job;
  ASSERT_TRUE(stub->SubmitJob(As(kMlToken).get(), req, &job).ok());
  v1::Job done;
  ASSERT_TRUE(WaitJobEnded(*stub, kMlToken, ml.id(), job.id(), done, 60s));
  std::string log = ReadFile(done.log_path());
  EXPECT_EQ(done.state(), "SUCCEEDED") << log;
  EXPECT_NE(log.find("done"), std::string::npos) << log;
  EXPECT_EQ(log.find("vision-secret"), std::string::npos) << log;
  // The victim is untouched, and the files are what the provider promises.
  EXPECT_EQ(ReadFile(state + "/clusters/" + vision.id() + "/secret.txt"), "vision-secret\n");
  struct stat st {};
  ASSERT_EQ(::stat((state + "/clusters/" + vision.id()).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(static_cast<int64_t>(st.st_uid), uid_of(victim));
  ASSERT_EQ(::stat(vision.nodes(0).log_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_uid, 0u);
  // Nothing of the service's environment reaches a node but the allow list.
  std::string env = ReadFile("/proc/" + std::to_string(victim) + "/environ");
  EXPECT_EQ(env.find("RELAY_KAFKA"), std::string::npos);
  EXPECT_EQ(env.find("GTEST"), std::string::npos);
  EXPECT_NE(env.find("RELAY_TEAM=vision"), std::string::npos);
}

TEST(LifecycleIt, CreateScaleJobsAndDeleteWithRealProcesses) {
  LifecycleStack stack("crud");
  ASSERT_NE(stack.Start(1), 0);
  ASSERT_TRUE(stack.WaitLeading(1)) << stack.Log(1);
  auto stub = stack.Stub(1);

  v1::Cluster created;
  ASSERT_TRUE(stub->CreateCluster(As(kMlToken).get(), CommandCluster(2, "crud-1"), &created).ok());
  EXPECT_EQ(created.spec().team(), "ml");
  EXPECT_EQ(WaitState(*stub, kMlToken, created.id(), {"IDLE", "FAILED"}), "IDLE") << stack.Log(1);
  EXPECT_EQ(NodeSessions(stack.owner(), created.id()).size(), 2u);
  v1::Cluster again;
  ASSERT_TRUE(stub->CreateCluster(As(kMlToken).get(), CommandCluster(2, "crud-1"), &again).ok());
  EXPECT_EQ(again.id(), created.id()) << "the same request_id is the same cluster";

  // This instance runs team ml's clusters only (lifecycle.local.team): the
  // local provider never runs two teams under one uid.
  v1::Cluster refused;
  auto other_team = stub->CreateCluster(As(kVisionToken).get(), CommandCluster(1, "vision-1"), &refused);
  EXPECT_EQ(other_team.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(other_team.error_message().find("runs team ml's clusters only"), std::string::npos)
      << other_team.error_message();

  // Another team cannot see or touch it.
  v1::GetClusterRequest get;
  get.set_id(created.id());
  v1::Cluster out;
  EXPECT_EQ(stub->GetCluster(As(kVisionToken).get(), get, &out).error_code(), grpc::StatusCode::NOT_FOUND);
  v1::DeleteClusterRequest del;
  del.set_id(created.id());
  EXPECT_EQ(stub->DeleteCluster(As(kVisionToken).get(), del, &out).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(NodeSessions(stack.owner(), created.id()).size(), 2u);

  // Scale up, then down.
  v1::ScaleClusterRequest scale;
  scale.set_id(created.id());
  scale.set_node_group("workers");
  scale.set_count(3);
  ASSERT_TRUE(stub->ScaleCluster(As(kMlToken).get(), scale, &out).ok());
  EXPECT_TRUE(WaitFor([&] { return NodeSessions(stack.owner(), created.id()).size() == 3; }, 20s));
  scale.set_count(1);
  ASSERT_TRUE(stub->ScaleCluster(As(kMlToken).get(), scale, &out).ok());
  EXPECT_TRUE(WaitFor([&] { return NodeSessions(stack.owner(), created.id()).size() == 1; }, 20s));

  // Jobs: output kept in a log file, exit codes, cancellation.
  auto submit = [&](const std::string& entry) {
    v1::SubmitJobRequest req;
    req.set_cluster_id(created.id());
    req.set_entrypoint(entry);
    v1::Job job;
    EXPECT_TRUE(stub->SubmitJob(As(kMlToken).get(), req, &job).ok());
    return job.id();
  };
  auto wait_job = [&](const std::string& job_id) {
    v1::Job job;
    WaitFor(
        [&] {
          v1::GetJobRequest req;
          req.set_cluster_id(created.id());
          req.set_job_id(job_id);
          job.Clear();
          return stub->GetJob(As(kMlToken).get(), req, &job).ok() && job.state() != "PENDING" && job.state() != "RUNNING";
        },
        30s);
    return job;
  };
  std::string ok = submit("echo hello from $RELAY_JOB_ID");
  std::string bad = submit("echo failing >&2; exit 3");
  std::string slow = submit("sleep 600");
  v1::Job ok_job = wait_job(ok), bad_job = wait_job(bad);
  EXPECT_EQ(ok_job.state(), "SUCCEEDED");
  EXPECT_EQ(ok_job.exit_code(), 0);
  EXPECT_EQ(ReadFile(ok_job.log_path()), "hello from " + ok + "\n");
  EXPECT_EQ(bad_job.state(), "FAILED");
  EXPECT_EQ(bad_job.exit_code(), 3);
  EXPECT_EQ(ReadFile(bad_job.log_path()), "failing\n");
  EXPECT_EQ(GetCluster(*stub, kMlToken, created.id()).state(), "RUNNING") << "a job runs";
  v1::CancelJobRequest cancel;
  cancel.set_cluster_id(created.id());
  cancel.set_job_id(slow);
  v1::Job cancelled;
  ASSERT_TRUE(stub->CancelJob(As(kMlToken).get(), cancel, &cancelled).ok());
  EXPECT_EQ(wait_job(slow).state(), "CANCELLED");
  EXPECT_EQ(WaitState(*stub, kMlToken, created.id(), {"IDLE"}), "IDLE");

  // Delete: every process of the cluster goes; its history stays.
  ASSERT_TRUE(stub->DeleteCluster(As(kMlToken).get(), del, &out).ok());
  EXPECT_EQ(WaitState(*stub, kMlToken, created.id(), {"TERMINATED", "FAILED"}), "TERMINATED");
  EXPECT_EQ(ProcessTable(stack.owner()).count(created.id()), 0u) << "no process of the cluster is left";
  v1::Cluster ended = GetCluster(*stub, kMlToken, created.id());
  EXPECT_EQ(ended.jobs_size(), 3);
  EXPECT_FALSE(ended.nodes(0).log_path().empty());
  v1::ListJobsRequest lj;
  lj.set_cluster_id(created.id());
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(stub->ListJobs(As(kMlToken).get(), lj, &jobs).ok());
  EXPECT_EQ(jobs.jobs_size(), 3);

  // The event log has the whole story, usage included.
  std::string error;
  std::set<std::string> seen;
  double node_seconds = 0;
  for (const auto& r : testing::ReadTopic(testing::FixtureBootstrap(), "cluster.events", 30s, &error)) {
    v1::ClusterEvent e;
    if (!e.ParseFromString(r.value) || e.cluster_id() != created.id()) continue;
    seen.insert(e.kind() + ":" + e.state());
    node_seconds += e.node_seconds();
  }
  for (const char* want : {"request:REQUESTED", "cluster:PROVISIONING", "cluster:RUNNING", "cluster:IDLE",
                           "cluster:TERMINATING", "cluster:TERMINATED", "job:SUCCEEDED", "job:FAILED", "job:CANCELLED",
                           "node:RUNNING", "node:EXITED", "usage:TERMINATED"}) {
    EXPECT_TRUE(seen.count(want)) << want << " in " << ::testing::PrintToString(seen);
  }
  EXPECT_GT(node_seconds, 0);
}

// `relayctl clusters`, the API's command line, on a real instance: each
// command's output and exit code (0 done, 1 the call failed, 2 usage), the
// token from a file. `relay-lifecycle ctl`, where it lived before, says so.
TEST(LifecycleIt, RelayctlClustersDrivesTheApiFromAShell) {
  LifecycleStack stack("ctl");
  ASSERT_NE(stack.Start(1), 0);
  ASSERT_TRUE(stack.WaitLeading(1)) << stack.Log(1);
  const std::string token_file = stack.dir() + "/ml.token";
  std::ofstream(token_file) << kMlToken << "\n";
  struct Run {
    int code = -1;
    std::string out, err;
  };
  int runs = 0;
  auto run = [&](const std::string& command_line) {
    std::string err = stack.dir() + "/ctl" + std::to_string(++runs) + ".err";
    Run r;
    r.code = testing::RunCommand("env -u LIFECYCLE_GRPC -u LIFECYCLE_TOKEN " + command_line + " 2>" + err, &r.out);
    r.err = ReadFile(err);
    return r;
  };
  const std::string relayctl = Env("RELAY_IT_RELAYCTL_BIN") + " clusters --addr " + stack.GrpcAddress(1);
  auto ctl = [&](const std::string& args) { return run(relayctl + " --token-file " + token_file + " " + args); };
  auto json_of = [](const Run& r) {
    boost::system::error_code ec;
    auto v = boost::json::parse(r.out, ec);
    return ec || !v.is_object() ? boost::json::object{} : v.as_object();
  };

  std::ofstream(stack.dir() + "/spec.json")
      << R"({"kind":"command","nodeGroups":[{"name":"workers","count":1,"command":["sleep","600"]}]})";
  Run created = ctl("create --request-id ctl-1 --spec @" + stack.dir() + "/spec.json");
  ASSERT_EQ(created.code, 0) << created.err;
  const std::string id(json_of(created)["id"].as_string());
  EXPECT_EQ(json_of(created)["spec"].as_object()["team"], "ml") << created.out;
  Run idle = ctl("wait " + id + " IDLE --timeout 60");
  ASSERT_EQ(idle.code, 0) << idle.err << stack.Log(1);
  EXPECT_EQ(idle.out, id + " IDLE\n");
  Run got = ctl("get " + id);
  EXPECT_EQ(got.code, 0) << got.err;
  EXPECT_EQ(json_of(got)["state"], "IDLE") << got.out;
  Run listed = ctl("list");
  EXPECT_EQ(listed.code, 0) << listed.err;
  EXPECT_NE(listed.out.find(id + "\tml\tIDLE\t1 nodes\t0 jobs\t"), std::string::npos) << listed.out;

  // Jobs: the entrypoint after --; wait-job exits 0 only for SUCCEEDED.
  Run ok = ctl("submit " + id + " -- echo hello");
  ASSERT_EQ(ok.code, 0) << ok.err;
  const std::string ok_id(json_of(ok)["id"].as_string());
  Run ok_done = ctl("wait-job " + id + " " + ok_id + " --timeout 60");
  EXPECT_EQ(ok_done.code, 0) << ok_done.err << ok_done.out;
  EXPECT_EQ(json_of(ok_done)["state"], "SUCCEEDED") << ok_done.out;
  Run bad = ctl("submit " + id + " -- 'exit 3'");
  ASSERT_EQ(bad.code, 0) << bad.err;
  const std::string bad_id(json_of(bad)["id"].as_string());
  Run bad_done = ctl("wait-job " + id + " " + bad_id + " --timeout 60");
  EXPECT_EQ(bad_done.code, 1) << bad_done.out;
  EXPECT_EQ(json_of(bad_done)["state"], "FAILED") << bad_done.out;
  Run job = ctl("job " + id + " " + ok_id);
  EXPECT_EQ(json_of(job)["entrypoint"], "echo hello") << job.out;
  Run jobs = ctl("jobs " + id);
  EXPECT_EQ(jobs.code, 0) << jobs.err;
  EXPECT_NE(jobs.out.find(ok_id + "\tSUCCEEDED\t0\techo hello\n"), std::string::npos) << jobs.out;
  EXPECT_NE(jobs.out.find(bad_id + "\tFAILED\t3\texit 3\n"), std::string::npos) << jobs.out;

  Run scaled = ctl("scale " + id + " workers 2");
  EXPECT_EQ(scaled.code, 0) << scaled.err;
  EXPECT_EQ(json_of(scaled)["spec"].as_object()["node_groups"].as_array()[0].as_object()["count"], 2) << scaled.out;
  Run deleted = ctl("delete " + id);
  EXPECT_EQ(deleted.code, 0) << deleted.err;
  Run gone = ctl("wait " + id + " TERMINATED --timeout 60");
  EXPECT_EQ(gone.code, 0) << gone.err << stack.Log(1);
  // An ended cluster's watch is its last state; waiting for another fails.
  Run watched = ctl("watch " + id);
  EXPECT_EQ(watched.code, 0) << watched.err;
  EXPECT_EQ(json_of(watched)["state"], "TERMINATED") << watched.out;
  Run never = ctl("wait " + id + " IDLE --timeout 10");
  EXPECT_EQ(never.code, 1);
  EXPECT_EQ(never.err.rfind("relayctl clusters: cluster " + id + " ended TERMINATED (", 0), 0u) << never.err;
  EXPECT_NE(never.err.find("never IDLE"), std::string::npos) << never.err;

  // The call refused: exit 1 with the gRPC status.
  Run no_token = run(relayctl + " list");
  EXPECT_EQ(no_token.code, 1);
  EXPECT_EQ(no_token.err.rfind("relayctl clusters: UNAUTHENTICATED: ", 0), 0u) << no_token.err;
  Run unknown = ctl("get no-such-cluster");
  EXPECT_EQ(unknown.code, 1);
  EXPECT_EQ(unknown.err.rfind("relayctl clusters: NOT_FOUND: ", 0), 0u) << unknown.err;
  // Usage: exit 2, the reason first, then the usage.
  for (const auto& [command_line, says] : std::vector<std::pair<std::string, std::string>>{
           {relayctl + " --token-file " + token_file, "no command"},
           {Env("RELAY_IT_RELAYCTL_BIN") + " clusters list", "no address: --addr or LIFECYCLE_GRPC"},
           {relayctl + " frobnicate", "unknown command or wrong arguments: frobnicate"},
           {relayctl + " get", "unknown command or wrong arguments: get"},
           {relayctl + " list --bogus", "unknown flag --bogus"},
           {relayctl + " create --spec nonsense", "--spec is not a ClusterSpec"},
           {relayctl + " wait x IDLE --timeout soon", "--timeout needs seconds"},
           {relayctl + " submit " + id, "submit ID -- ENTRYPOINT..."}}) {
    Run r = run(command_line);
    EXPECT_EQ(r.code, 2) << command_line << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("relayctl clusters: " + says, 0), 0u) << r.err;
    EXPECT_NE(r.err.find("\nusage: relayctl clusters [--addr HOST:PORT]"), std::string::npos) << r.err;
  }
  Run old = run(Env("RELAY_IT_LIFECYCLE_BIN") + " ctl list");
  EXPECT_EQ(old.code, 2);
  EXPECT_NE(old.err.find("`relayctl clusters`"), std::string::npos) << old.err;
}

// The service in this process, on a fake clock: an idle cluster is torn
// down once the clock passes its idle TTL, not before.
TEST(LifecycleIt, IdleClustersAreCollectedOnAnInjectedClock) {
  LifecycleStack stack("idle");
  auto env = stack.Env_();
  env["RELAY_LIFECYCLE_LEADER_SESSION_TIMEOUT"] = "6s";
  auto config = Config::Load("", env);
  ASSERT_TRUE(config.ok());
  FakeClock clock;
  service::Factories factories;
  factories.clock = &clock;
  auto host = service::Host::Start(lifecycle::Definition(), std::move(*config), factories);
  ASSERT_TRUE(host.ok()) << host.status();
  uint16_t port = (*host)->port();
  ASSERT_TRUE(WaitFor([&] { return testing::MetricValue(port, "relay_lifecycle_leader") == 1; }, 60s));
  auto stub = v1::LifecycleApi::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(static_cast<int>(testing::MetricValue(port, "relay_lifecycle_grpc_port"))),
      grpc::InsecureChannelCredentials()));
  v1::Cluster c;
  ASSERT_TRUE(stub->CreateCluster(As(kMlToken).get(), CommandCluster(1, "", /*idle_ttl=*/300), &c).ok());
  ASSERT_EQ(WaitState(*stub, kMlToken, c.id(), {"IDLE"}), "IDLE");
  clock.Advance(299s);
  std::this_thread::sleep_for(1s);  // several passes
  EXPECT_EQ(GetCluster(*stub, kMlToken, c.id()).state(), "IDLE");
  EXPECT_EQ(NodeSessions(stack.owner(), c.id()).size(), 1u);
  clock.Advance(2s);
  EXPECT_EQ(WaitState(*stub, kMlToken, c.id(), {"TERMINATED"}, 30s), "TERMINATED");
  v1::Cluster ended = GetCluster(*stub, kMlToken, c.id());
  EXPECT_NE(ended.reason().find("idle"), std::string::npos) << ended.reason();
  EXPECT_EQ(ProcessTable(stack.owner()).count(c.id()), 0u);
  EXPECT_TRUE((*host)->Shutdown());
}

// SIGKILL right after clusters were requested (mid-provisioning), then a
// new controller: every cluster converges, each node exactly once, and no
// process is left that no cluster wants.
TEST(LifecycleIt, KilledDuringProvisioningConvergesWithoutOrphansOrDuplicates) {
  LifecycleStack stack("crash");
  ASSERT_NE(stack.Start(1), 0);
  ASSERT_TRUE(stack.WaitLeading(1)) << stack.Log(1);
  auto stub = stack.Stub(1);
  std::vector<std::string> ids;
  for (int i = 0; i < 6; ++i) {
    v1::Cluster c;
    ASSERT_TRUE(stub->CreateCluster(As(kMlToken).get(), CommandCluster(3), &c).ok());
    ids.push_back(c.id());
  }
  stack.proc(1).Signal(SIGKILL);
  ASSERT_EQ(stack.proc(1).Wait(10s), 128 + SIGKILL);
  // Whatever it had started survives it (nodes are sessions of their own).
  ASSERT_NE(stack.Start(2), 0);
  ASSERT_TRUE(stack.WaitLeading(2, 90s)) << stack.Log(2);
  auto stub2 = stack.Stub(2);
  for (const auto& id : ids) {
    EXPECT_EQ(WaitState(*stub2, kMlToken, id, {"IDLE", "FAILED"}), "IDLE") << stack.Log(2);
    auto sessions = NodeSessions(stack.owner(), id);
    EXPECT_EQ(sessions.size(), 3u) << id;
    v1::Cluster c = GetCluster(*stub2, kMlToken, id);
    std::set<int64_t> recorded;
    for (const auto& n : c.nodes()) {
      if (n.state() == "RUNNING") recorded.insert(n.pid());
    }
    std::set<int64_t> running;
    for (auto& [node, pid] : sessions) running.insert(pid);
    EXPECT_EQ(recorded, running) << "the record names exactly the processes that run";
  }
  auto table = ProcessTable(stack.owner());
  for (const auto& [cluster, procs] : table) {
    EXPECT_TRUE(std::find(ids.begin(), ids.end(), cluster) != ids.end()) << "orphan of " << cluster;
  }
  for (const auto& id : ids) {
    v1::DeleteClusterRequest del;
    del.set_id(id);
    v1::Cluster out;
    ASSERT_TRUE(stub2->DeleteCluster(As(kMlToken).get(), del, &out).ok());
  }
  for (const auto& id : ids) EXPECT_EQ(WaitState(*stub2, kMlToken, id, {"TERMINATED"}), "TERMINATED");
  EXPECT_TRUE(WaitFor([&] { return ProcessTable(stack.owner()).empty(); }, 10s)) << "nothing leaks";
}

// Issue 15, item 6: fencing that survives compaction. Two hosts of one
// installation (each its own state dir and owner, one election group and
// state topic). A leads, then freezes (SIGSTOP); B takes over and changes
// a cluster. A thaws still believing it leads and takes a delete: its write
// is refused at the broker (B's transactional writer fenced A's), so the
// caller gets UNAVAILABLE, and after a forced compaction (tiny segments, a
// cleaner that runs every second) the cluster's surviving record is B's.
// With fencing only at readers, A's late record would be the key's latest
// offset, the one compaction keeps.
TEST(LifecycleIt, ADeposedLeadersLateWriteIsFencedAndCompactionKeepsTheNewLeaders) {
  std::map<std::string, std::string> fast_compaction = {{"cleanup.policy", "compact"},
                                                        {"segment.ms", "200"},
                                                        {"min.cleanable.dirty.ratio", "0.001"},
                                                        {"min.compaction.lag.ms", "0"},
                                                        {"delete.retention.ms", "100"}};
  LifecycleStack first("fence-a", "", nullptr, fast_compaction);
  LifecycleStack second("fence-b", "", &first);
  ASSERT_NE(first.Start(1), 0) << first.Log(1);
  ASSERT_TRUE(first.WaitLeading(1)) << first.Log(1);
  ASSERT_NE(second.Start(1), 0) << second.Log(1);
  ASSERT_TRUE(WaitFor([&] { return second.Log(1).find("gRPC listening") != std::string::npos; }, 30s));
  // Whichever the group settles on leads (the same one, ready, for 3 s):
  // that one is A.
  LifecycleStack* a = nullptr;
  auto since = std::chrono::steady_clock::now();
  ASSERT_TRUE(WaitFor(
      [&] {
        bool one = first.Leading(1), two = second.Leading(1);
        LifecycleStack* now = one && !two ? &first : two && !one ? &second : nullptr;
        if (now && HttpClient("127.0.0.1", now->port(1)).Get("/readyz").status != 200) now = nullptr;
        if (now != a || !now) since = std::chrono::steady_clock::now();
        a = now;
        return a && std::chrono::steady_clock::now() - since >= 3s;
      },
      60s));
  LifecycleStack* b = a == &first ? &second : &first;
  auto stub_a = a->Stub(1);
  v1::Cluster c;
  ASSERT_TRUE(stub_a->CreateCluster(As(kMlToken).get(), CommandCluster(1, "fence-1"), &c).ok());
  ASSERT_EQ(WaitState(*stub_a, kMlToken, c.id(), {"IDLE"}), "IDLE") << a->Log(1);

  a->proc(1).Signal(SIGSTOP);
  ASSERT_TRUE(b->WaitLeading(1, 60s)) << b->Log(1);
  auto stub_b = b->Stub(1);
  v1::ScaleClusterRequest scale;
  scale.set_id(c.id());
  scale.set_node_group("workers");
  scale.set_count(2);
  v1::Cluster scaled;
  ASSERT_TRUE(stub_b->ScaleCluster(As(kMlToken).get(), scale, &scaled).ok());
  ASSERT_EQ(WaitState(*stub_b, kMlToken, c.id(), {"IDLE"}), "IDLE") << b->Log(1);
  int64_t b_epoch = static_cast<int64_t>(testing::MetricValue(b->port(1), "relay_lifecycle_epoch"));

  // A thaws, still believing it leads, and is asked to delete the cluster.
  std::atomic<int> code{-1};
  std::thread caller([&] {
    v1::DeleteClusterRequest del;
    del.set_id(c.id());
    v1::Cluster out;
    code = stub_a->DeleteCluster(As(kMlToken, 20s).get(), del, &out).error_code();
  });
  std::this_thread::sleep_for(300ms);
  a->proc(1).Signal(SIGCONT);
  caller.join();
  EXPECT_NE(code.load(), grpc::StatusCode::OK) << "a deposed leader's delete was acknowledged";
  EXPECT_TRUE(WaitFor([&] { return a->Log(1).find("fenced") != std::string::npos; }, 20s)) << a->Log(1);

  // Force a compaction: tombstones of other keys roll the state topic's
  // segments until the cluster has one record left in its partition.
  kafka::ProducerOptions po;
  po.bootstrap = testing::FixtureBootstrap();
  auto filler = std::move(*kafka::NewKafkaProducer(po, nullptr));
  std::vector<v1::ClusterRecord> records;
  auto deadline = std::chrono::steady_clock::now() + 120s;
  for (int i = 0; std::chrono::steady_clock::now() < deadline; ++i) {
    for (int p = 0; p < 3; ++p) {
      std::promise<absl::Status> acked;
      filler->Send(kafka::Record{first.clusters_topic(), "filler-" + std::to_string(i), "", {}, p},
                   [&acked](absl::Status s) { acked.set_value(s); });
      ASSERT_TRUE(acked.get_future().get().ok());
    }
    std::this_thread::sleep_for(250ms);
    if (i % 8 != 7) continue;
    std::string error;
    records.clear();
    for (const auto& r : testing::ReadTopic(testing::FixtureBootstrap(), first.clusters_topic(), 10s, &error)) {
      v1::ClusterRecord rec;
      if (r.key == c.id() && rec.ParseFromString(r.value)) records.push_back(rec);
    }
    if (records.size() == 1) break;
  }
  ASSERT_EQ(records.size(), 1u) << "no compaction within 120 s";
  // B's, or a later leader's (A may lead again after it rejoins, with a
  // new epoch): never the deposed epoch's.
  EXPECT_GE(records[0].leader_epoch(), b_epoch) << "compaction kept a deposed leader's record";
  EXPECT_NE(records[0].cluster().state(), "TERMINATING");
  EXPECT_NE(records[0].cluster().state(), "TERMINATED");
  // Whoever leads now still has the cluster, scaled, not deleted.
  EXPECT_TRUE(WaitFor(
      [&] {
        for (LifecycleStack* s : {a, b}) {
          v1::GetClusterRequest get;
          get.set_id(c.id());
          v1::Cluster out;
          if (s->Stub(1)->GetCluster(As(kMlToken).get(), get, &out).ok()) {
            return out.state() == "IDLE" && out.nodes_size() >= 2;
          }
        }
        return false;
      },
      30s));
}

// Two instances: never both leading; the standby refuses calls; SIGKILL
// the leader and the standby takes over within seconds, adopting the
// clusters without starting their nodes again.
TEST(LifecycleIt, OneLeaderAtATimeAndTheStandbyTakesOver) {
  LifecycleStack stack("leader");
  ASSERT_NE(stack.Start(1), 0);
  ASSERT_TRUE(stack.WaitLeading(1)) << stack.Log(1);
  ASSERT_NE(stack.Start(2), 0);
  // Let the second join the group and the leadership settle.
  ASSERT_TRUE(WaitFor([&] { return stack.Log(2).find("gRPC listening") != std::string::npos; }, 30s));
  int leader = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        bool a = stack.Leading(1), b = stack.Leading(2);
        leader = a ? 1 : b ? 2 : 0;
        return a != b;
      },
      60s));
  int standby = 3 - leader;
  for (int i = 0; i < 30; ++i) {
    ASSERT_FALSE(stack.Leading(1) && stack.Leading(2)) << "two leaders";
    std::this_thread::sleep_for(100ms);
  }
  leader = stack.Leading(1) ? 1 : 2;
  standby = 3 - leader;
  auto stub = stack.Stub(leader);
  v1::Cluster c;
  ASSERT_TRUE(stub->CreateCluster(As(kMlToken).get(), CommandCluster(2), &c).ok());
  ASSERT_EQ(WaitState(*stub, kMlToken, c.id(), {"IDLE"}), "IDLE");
  auto before = NodeSessions(stack.owner(), c.id());
  ASSERT_EQ(before.size(), 2u);
  // The standby refuses: it does not lead.
  v1::GetClusterRequest get;
  get.set_id(c.id());
  v1::Cluster out;
  EXPECT_EQ(stack.Stub(standby)->GetCluster(As(kMlToken).get(), get, &out).error_code(), grpc::StatusCode::UNAVAILABLE);

  auto killed_at = std::chrono::steady_clock::now();
  stack.proc(leader).Signal(SIGKILL);
  ASSERT_TRUE(stack.WaitLeading(standby, 60s)) << stack.Log(standby);
  double takeover = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  EXPECT_LT(takeover, 30) << "the standby took over in " << takeover << " s";
  RecordProperty("takeover_seconds", std::to_string(takeover));
  auto stub2 = stack.Stub(standby);
  EXPECT_EQ(GetCluster(*stub2, kMlToken, c.id()).state(), "IDLE");
  std::this_thread::sleep_for(1500ms);  // passes and a sweep
  EXPECT_EQ(NodeSessions(stack.owner(), c.id()), before) << "the same processes: adopted, not restarted";
}

}  // namespace
}  // namespace relay
