// relay-lifecycle with real Ray clusters (the suite's venv), and the attacks and refusals of
// issue 27 item 1, and the runner pool; part of lifecycle_it_test (support: lifecycle_it_support.h).
#include <boost/json.hpp>

#include "lifecycle_it_support.h"
#include "relay/kafka/producer.h"
#include "relay/v1/webhook.pb.h"
#include "support/fixtures.h"

namespace relay {
namespace {

using namespace lifecycle_it;

// A real Ray cluster (the suite's venv: tools/python/setup-env), a real Ray
// job through the Jobs API, token auth in force, and nothing left after.
// The Ray venv of the suite (tools/python/setup-env), its `ray`.
std::string RayBin() {
  std::string python;
  EXPECT_EQ(testing::RunCommand(Env("RELAY_ROOT") + "/tools/python/setup-env 2>/dev/null | tail -n 1", &python), 0);
  while (!python.empty() && (python.back() == '\n' || python.back() == ' ')) python.pop_back();
  return python.substr(0, python.rfind('/')) + "/ray";
}

v1::CreateClusterRequest RayCluster(int workers) {
  v1::CreateClusterRequest req;
  auto* s = req.mutable_spec();
  s->set_kind("ray");
  auto* head = s->add_node_groups();
  head->set_name("head");
  head->set_count(1);
  head->set_ray_role("head");
  auto* w = s->add_node_groups();
  w->set_name("workers");
  w->set_count(workers);
  w->set_ray_role("worker");
  return req;
}

// Issue 27, item 1: a team cannot become root through a symlink, nor read
// another team's Ray temp dir. Team ml's job plants, as an attacker would,
// a symlink at every path the service writes for its cluster (the token
// file and its temporary, in the work dir where they used to be and in the
// tokens dir where they are now, the Ray temp dir), each pointing at a
// root-owned file of known content, and a link to a root-owned directory
// in its work dir; then the cluster scales (StartNode writes the token
// again) and is deleted (its trees removed). Every target keeps its
// content, owner and mode, and team vision's Ray temp dir stays closed.
TEST(LifecycleIt, ATeamsSymlinksNeverTurnTheServicesWritesOnRootsFiles) {
  if (::geteuid() != 0) GTEST_SKIP() << "uid isolation needs root (CI runs as root)";
  LifecycleStack stack("symlinks");
  ASSERT_NE(stack.Start(1, {{"RELAY_LIFECYCLE_LOCAL_TEAM", ""},
                            {"RELAY_LIFECYCLE_LOCAL_RUN_AS", ""},
                            {"RELAY_LIFECYCLE_LOCAL_UID_RANGE", "61100-61199"},
                            {"RELAY_LIFECYCLE_RAY_BIN", RayBin()}}),
            0)
      << stack.Log(1);
  ASSERT_TRUE(stack.WaitLeading(1)) << stack.Log(1);
  auto stub = stack.Stub(1);
  auto create = [&](const char* token, int workers) {
    v1::Cluster c;
    EXPECT_TRUE(stub->CreateCluster(As(token).get(), RayCluster(workers), &c).ok());
    EXPECT_EQ(WaitState(*stub, token, c.id(), {"IDLE", "FAILED"}, 120s), "IDLE") << stack.Log(1);
    return GetCluster(*stub, token, c.id());
  };
  v1::Cluster victim = create(kVisionToken, 0);
  v1::Cluster attacker = create(kMlToken, 0);
  auto uid_of = [](int64_t pid) {
    std::string status = ReadFile("/proc/" + std::to_string(pid) + "/status");
    auto at = status.find("\nUid:\t");
    return at == std::string::npos ? -1 : std::atoll(status.c_str() + at + 6);
  };
  ASSERT_EQ(attacker.nodes_size(), 1);
  ASSERT_EQ(victim.nodes_size(), 1);
  const int64_t ml_uid = uid_of(attacker.nodes(0).pid()), vision_uid = uid_of(victim.nodes(0).pid());
  ASSERT_GE(ml_uid, 61100);
  ASSERT_GE(vision_uid, 61100);
  ASSERT_NE(ml_uid, vision_uid);

  // Root-owned targets of known content, one per planted link.
  const std::string state = stack.dir() + "/state", targets = stack.dir() + "/targets";
  const std::string work = state + "/clusters/" + attacker.id();
  const std::string temp = "/tmp/rr/" + std::to_string(ml_uid) + "/" + attacker.id();
  const std::string vision_temp = "/tmp/rr/" + std::to_string(vision_uid) + "/" + victim.id();
  const std::vector<std::string> planted = {
      work + "/ray-token.tmp",           work + "/ray-token",       state + "/tokens/" + attacker.id() + ".tmp",
      state + "/tokens/" + attacker.id(), temp + "/ray-token.tmp", temp + "/session_latest/ray-token"};
  ASSERT_EQ(testing::RunCommand("mkdir -p " + targets + "/dir && chmod 0755 " + targets), 0);
  std::string script = "fail=0\n";
  for (size_t i = 0; i < planted.size(); ++i) {
    std::string target = targets + "/t" + std::to_string(i);
    std::ofstream(target) << "root-owned " << i << "\n";
    ::chmod(target.c_str(), 0644);
    script += "ln -sfn " + target + " " + planted[i] + " 2>/dev/null && echo planted " + planted[i] + "\n";
  }
  std::ofstream(targets + "/dir/keep") << "keep\n";
  script += "ln -sfn " + targets + "/dir " + work + "/dir-link && echo planted dir-link\n";
  script += "ls " + vision_temp + " >/dev/null 2>&1 && { echo ATTACK: listed vision temp dir; fail=1; }\n";
  script += "ls /tmp/rr/" + std::to_string(vision_uid) + " >/dev/null 2>&1 && { echo ATTACK: listed vision temp root; fail=1; }\n";
  script += "cat " + vision_temp + "/session_latest/logs/raylet.out >/dev/null 2>&1 && { echo ATTACK: read vision raylet log; fail=1; }\n";
  script += "touch " + vision_temp + "/x 2>/dev/null && { echo ATTACK: wrote in vision temp dir; fail=1; }\n";
  script += "echo done; exit $fail\n";

  v1::SubmitJobRequest req;
  req.set_cluster_id(attacker.id());
  req.set_entrypoint(script);
  v1::Job job;
  ASSERT_TRUE(stub->SubmitJob(As(kMlToken).get(), req, &job).ok());
  v1::Job done;
  ASSERT_TRUE(WaitJobEnded(*stub, kMlToken, attacker.id(), job.id(), done, 120s));
  std::string log = ReadFile(done.log_path());
  EXPECT_EQ(done.state(), "SUCCEEDED") << log;
  // (The log also holds the script itself: only whole output lines count.)
  EXPECT_NE(log.find("\nplanted " + work + "/ray-token.tmp"), std::string::npos) << "the work dir is the team's: " << log;
  EXPECT_EQ(log.find("\nplanted " + state + "/tokens/"), std::string::npos) << "the tokens dir is the service's: " << log;

  // Scale up: StartNode makes the dirs and writes the token again.
  v1::ScaleClusterRequest scale;
  scale.set_id(attacker.id());
  scale.set_node_group("workers");
  scale.set_count(1);
  v1::Cluster out;
  ASSERT_TRUE(stub->ScaleCluster(As(kMlToken).get(), scale, &out).ok());
  EXPECT_TRUE(WaitFor([&] { return NodeSessions(stack.owner(), attacker.id()).size() == 2; }, 60s)) << stack.Log(1);
  EXPECT_EQ(WaitState(*stub, kMlToken, attacker.id(), {"IDLE", "FAILED"}, 120s), "IDLE") << stack.Log(1);

  auto targets_intact = [&](const std::string& when) {
    for (size_t i = 0; i < planted.size(); ++i) {
      std::string target = targets + "/t" + std::to_string(i);
      struct stat st {};
      ASSERT_EQ(::stat(target.c_str(), &st), 0) << when << ": " << target;
      EXPECT_EQ(ReadFile(target), "root-owned " + std::to_string(i) + "\n") << when << ": " << planted[i];
      EXPECT_EQ(st.st_uid, 0u) << when << ": " << planted[i];
      EXPECT_EQ(st.st_mode & 0777, 0644u) << when << ": " << planted[i];
    }
    EXPECT_EQ(ReadFile(targets + "/dir/keep"), "keep\n") << when;
  };
  targets_intact("after the scale-up");
  struct stat token {};
  ASSERT_EQ(::lstat((state + "/tokens/" + attacker.id()).c_str(), &token), 0);
  EXPECT_TRUE(S_ISREG(token.st_mode));
  EXPECT_EQ(static_cast<int64_t>(token.st_uid), ml_uid);
  EXPECT_EQ(token.st_mode & 0777, 0600u);

  // Delete: the team's trees go, and no link in them is followed.
  v1::DeleteClusterRequest del;
  del.set_id(attacker.id());
  ASSERT_TRUE(stub->DeleteCluster(As(kMlToken).get(), del, &out).ok());
  EXPECT_EQ(WaitState(*stub, kMlToken, attacker.id(), {"TERMINATED", "FAILED"}, 60s), "TERMINATED");
  EXPECT_TRUE(WaitFor([&] { return ::access(work.c_str(), F_OK) != 0 && ::access(temp.c_str(), F_OK) != 0; }, 20s))
      << "the work and temp dirs are removed";
  targets_intact("after the delete");
  del.set_id(victim.id());
  ASSERT_TRUE(stub->DeleteCluster(As(kVisionToken).get(), del, &out).ok());
  EXPECT_EQ(WaitState(*stub, kVisionToken, victim.id(), {"TERMINATED", "FAILED"}, 60s), "TERMINATED");
}

// The roots the service writes under are its own or it does not start, and
// as root a single team's jobs never run as root: each refusal names why.
TEST(LifecycleIt, ForeignRootsAndRootJobsAreRefusedAtStart) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (CI runs as root)";
  LifecycleStack stack("roots");
  ASSERT_EQ(stack.Start(1, {{"RELAY_LIFECYCLE_LOCAL_RUN_AS", ""}}), 0) << "single team as root without run_as";
  EXPECT_NE(stack.Log(1).find("lifecycle.local.run_as"), std::string::npos) << stack.Log(1);
  ASSERT_EQ(stack.Start(2, {{"RELAY_LIFECYCLE_LOCAL_RUN_AS", "root"}}), 0) << "run_as root";
  EXPECT_NE(stack.Log(2).find("jobs must not run as root"), std::string::npos) << stack.Log(2);
  // A temp root someone else made first (a team could replace what is
  // below it), and one that is a symlink.
  // (Short paths: lifecycle.local.ray_temp_root is at most 16 bytes.)
  std::string foreign = "/tmp/rf-" + std::to_string(::getpid()), link = "/tmp/rl-" + std::to_string(::getpid());
  ASSERT_EQ(testing::RunCommand("rm -rf " + foreign + " " + link + " && mkdir " + foreign + " && chown 61234 " + foreign +
                                " && ln -s /etc " + link),
            0);
  auto cleanup = absl::MakeCleanup([&] { testing::RunCommand("rm -rf " + foreign + " " + link); });
  ASSERT_EQ(stack.Start(3, {{"RELAY_LIFECYCLE_RAY_BIN", RayBin()}, {"RELAY_LIFECYCLE_LOCAL_RAY_TEMP_ROOT", foreign}}), 0);
  EXPECT_NE(stack.Log(3).find("belongs to uid 61234"), std::string::npos) << stack.Log(3);
  ASSERT_EQ(stack.Start(4, {{"RELAY_LIFECYCLE_RAY_BIN", RayBin()}, {"RELAY_LIFECYCLE_LOCAL_RAY_TEMP_ROOT", link}}), 0);
  EXPECT_NE(stack.Log(4).find("is a symlink"), std::string::npos) << stack.Log(4);
  struct stat etc {};
  ASSERT_EQ(::stat("/etc", &etc), 0);
  EXPECT_EQ(etc.st_mode & 0777, 0755u) << "the symlink's target was not chmodded";
}

TEST(LifecycleIt, RayClusterRunsARealRayJob) {
  std::string ray = RayBin();
  LifecycleStack stack("ray");
  ASSERT_NE(stack.Start(1, {{"RELAY_LIFECYCLE_RAY_BIN", ray}}), 0);
  ASSERT_TRUE(stack.WaitLeading(1)) << stack.Log(1);
  auto stub = stack.Stub(1);
  v1::CreateClusterRequest req = RayCluster(1);
  v1::Cluster c;
  auto created_at = std::chrono::steady_clock::now();
  ASSERT_TRUE(stub->CreateCluster(As(kMlToken).get(), req, &c).ok());
  ASSERT_EQ(WaitState(*stub, kMlToken, c.id(), {"IDLE", "FAILED"}, 120s), "IDLE") << stack.Log(1);
  RecordProperty("ray_ready_seconds",
                 std::to_string(std::chrono::duration<double>(std::chrono::steady_clock::now() - created_at).count()));
  v1::Cluster up = GetCluster(*stub, kMlToken, c.id());
  EXPECT_EQ(up.secrets_size(), 0) << "the Ray token never leaves the service";

  v1::SubmitJobRequest job;
  job.set_cluster_id(c.id());
  job.set_entrypoint(
      "python -c 'import ray; ray.init(); print(\"nodes\", sum(n[\"Alive\"] for n in ray.nodes())); "
      "print(\"answer\", ray.get(ray.remote(lambda: 6 * 7).remote()))'");
  v1::Job j;
  ASSERT_TRUE(stub->SubmitJob(As(kMlToken).get(), job, &j).ok());
  v1::Job done;
  ASSERT_TRUE(WaitJobEnded(*stub, kMlToken, c.id(), j.id(), done, 120s));
  EXPECT_EQ(done.state(), "SUCCEEDED") << done.reason();
  std::string log = ReadFile(done.log_path());
  EXPECT_NE(log.find("nodes 2"), std::string::npos) << log;
  EXPECT_NE(log.find("answer 42"), std::string::npos) << log;

  // The token is a 0600 file of the nodes' uid in the service's own tokens
  // directory, never in a node's environment (/proc shows that to every
  // process of the uid).
  for (auto& p : lifecycle::FindLabelled(stack.owner())) {
    std::string env = ReadFile("/proc/" + std::to_string(p.proc.pid) + "/environ");
    EXPECT_EQ(env.find("RAY_AUTH_TOKEN="), std::string::npos) << "pid " << p.proc.pid;
  }
  struct stat token_stat {};
  ASSERT_EQ(::stat((stack.dir() + "/state/tokens/" + c.id()).c_str(), &token_stat), 0);
  EXPECT_EQ(token_stat.st_mode & 0777, 0600u);
  if (::geteuid() == 0) {
    EXPECT_EQ(token_stat.st_uid, 65534u) << "as root, the nodes run as lifecycle.local.run_as";
  }

  // The dashboard's Jobs API refuses whoever lacks the cluster's token.
  int dashboard_port = 0;
  for (auto& p : lifecycle::FindLabelled(stack.owner())) {
    std::string cmdline = ReadFile("/proc/" + std::to_string(p.proc.pid) + "/cmdline");
    auto at = cmdline.find("--dashboard-port=");
    if (at != std::string::npos) dashboard_port = std::atoi(cmdline.c_str() + at + 17);
  }
  ASSERT_GT(dashboard_port, 0);
  EXPECT_EQ(HttpClient("127.0.0.1", static_cast<uint16_t>(dashboard_port)).Get("/api/jobs/").status, 401);

  v1::DeleteClusterRequest del;
  del.set_id(c.id());
  v1::Cluster out;
  ASSERT_TRUE(stub->DeleteCluster(As(kMlToken).get(), del, &out).ok());
  EXPECT_EQ(WaitState(*stub, kMlToken, c.id(), {"TERMINATED", "FAILED"}, 60s), "TERMINATED");
  EXPECT_TRUE(WaitFor([&] { return ProcessTable(stack.owner()).empty(); }, 20s)) << "no Ray process is left";
  EXPECT_EQ(ReadFile(done.log_path()), log) << "the job's log outlives the cluster";
}

// A runner pool follows real workflow_job payloads (the corpus intake's
// tests replay), written to the webhooks topic before the service starts
// (a replay of the backlog), up to its max and, after the scale-down delay,
// back to zero.
TEST(LifecycleIt, RunnerPoolFollowsReplayedWorkflowJobsUpAndBackToZero) {
  LifecycleStack stack("pool");
  const std::string topic = "it.webhooks." + Unique();
  ASSERT_EQ(testing::CreateTopic(testing::FixtureBootstrap(), topic, 3), "");
  std::map<std::string, std::string> real;  // action -> a real payload of the Hello-World job (labels: ubuntu-latest)
  std::string other;                        // a job for labels no pool has (self-hosted, k8s)
  for (const auto& p : testing::LoadCorpus()) {
    if (p.event != "workflow_job") continue;
    auto v = boost::json::parse(p.body).as_object();
    std::string action(v["action"].as_string());
    std::string repo(v["repository"].as_object()["full_name"].as_string());
    if (repo == "Codertocat/Hello-World" && !real.count(action)) real[action] = p.body;
    if (repo == "lineville/elastic-machines-testing") other = p.body;
  }
  ASSERT_TRUE(real.count("queued") && real.count("in_progress") && real.count("completed") && !other.empty());

  kafka::ProducerOptions po;
  po.bootstrap = testing::FixtureBootstrap();
  auto producer = std::move(*kafka::NewKafkaProducer(po, nullptr));
  auto send = [&](const std::string& body, int64_t job_id) {
    auto v = boost::json::parse(body).as_object();
    v["workflow_job"].as_object()["id"] = job_id;  // five jobs from one real payload
    v1::WebhookRecord w;
    w.set_delivery_id("it-" + Unique());
    w.set_event("workflow_job");
    w.set_action(std::string(v["action"].as_string()));
    w.set_body(boost::json::serialize(v));
    w.set_content_type("application/json");
    w.set_received_at_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::system_clock::now().time_since_epoch()).count());
    producer->Send(kafka::Record{topic, std::to_string(job_id), w.SerializeAsString(), {}, -1}, [](absl::Status st) {
      EXPECT_TRUE(st.ok()) << st;
    });
  };
  for (int64_t k = 0; k < 5; ++k) send(real["queued"], 7000 + k);
  send(other, 9999);
  ASSERT_TRUE(producer->Flush(10s).ok());

  // Sanitizer builds are slower to start runners: a longer delay keeps
  // "held within the delay" true of what the test can observe.
  const int delay_s = static_cast<int>(8 * testing::TimeScale());
  std::ofstream(stack.dir() + "/pools.yaml") << "pools:\n"
                                             << "  - name: ubuntu\n    team: ml\n    labels: [self-hosted, ubuntu-latest]\n"
                                             << "    min: 0\n    max: 3\n    scale_down_delay: " << delay_s << "s\n    command: [sleep, \"600\"]\n";
  ASSERT_NE(stack.Start(1, {{"RELAY_LIFECYCLE_POOLS_FILE", stack.dir() + "/pools.yaml"},
                            {"RELAY_LIFECYCLE_TOPICS_WEBHOOKS", topic}}),
            0);
  ASSERT_TRUE(stack.WaitLeading(1)) << stack.Log(1);
  auto runners = [&] {
    size_t n = 0;
    for (auto& [cluster, procs] : ProcessTable(stack.owner())) {
      for (auto& p : procs) n += (p.proc.pid == p.proc.sid && !p.node_id.empty()) ? 1 : 0;
    }
    return n;
  };
  EXPECT_TRUE(WaitFor([&] { return runners() == 3; }, 30s)) << "5 queued jobs, max 3: " << runners();
  auto scaled_up_at = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(1s);
  EXPECT_EQ(runners(), 3u) << "never above max";

  for (int64_t k = 0; k < 5; ++k) send(real["in_progress"], 7000 + k);
  for (int64_t k = 0; k < 5; ++k) send(real["completed"], 7000 + k);
  ASSERT_TRUE(producer->Flush(10s).ok());
  // No flapping: the pool holds its size for scale_down_delay after its
  // last scale-up, though every job completed.
  std::this_thread::sleep_until(scaled_up_at + std::chrono::seconds(delay_s) / 2);
  EXPECT_EQ(runners(), 3u) << "held within the scale-down delay";
  EXPECT_TRUE(WaitFor([&] { return runners() == 0; }, 30s)) << "back to zero: " << runners();
  // (scaled_up_at is when the test saw the runners, up to a second after
  // the pool's scale-up that the delay counts from.)
  EXPECT_GE(std::chrono::steady_clock::now() - scaled_up_at, std::chrono::seconds(delay_s) / 2);
  // The pool's cluster stays (at zero), ready for the next job.
  auto stub = stack.Stub(1);
  v1::ListClustersRequest q;
  (*q.mutable_labels())["relay.dev/pool"] = "ubuntu";
  v1::ListClustersResponse pools;
  ASSERT_TRUE(stub->ListClusters(As(kMlToken).get(), q, &pools).ok());
  ASSERT_EQ(pools.clusters_size(), 1);
  EXPECT_EQ(pools.clusters(0).spec().node_groups(0).count(), 0);
}

}  // namespace
}  // namespace relay
