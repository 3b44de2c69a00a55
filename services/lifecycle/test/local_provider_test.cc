// The local provider against real processes on this host: what it says of
// a job that ends, and what a node leaves behind. A short job can end
// between the provider's two looks at it (waitpid, then /proc): it must
// still be reported with its exit code, never as "ended, exit code unknown"
// (CI, 2026-11-28: `echo hello` was reported FAILED with -1 by
// lifecycle_it_test).
#include "relay/lifecycle/local_provider.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "relay/v1/lifecycle.pb.h"

namespace relay::lifecycle {
namespace {

class LocalProviderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/local-provider-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ::chmod(dir_.c_str(), 0711);  // searchable by the uid jobs run as
    owner_ = "local-provider-test-" + std::to_string(::getpid());
    auto p = NewLocalProvider(Options());
    ASSERT_TRUE(p.ok()) << p.status();
    provider_ = std::move(*p);
    ASSERT_TRUE(provider_->Acquire().ok());
    cluster_.set_id("ctest" + std::to_string(::getpid()));
    cluster_.mutable_spec()->set_kind("command");
    cluster_.mutable_spec()->set_team("ml");
    auto prepared = provider_->PrepareCluster(cluster_);
    ASSERT_TRUE(prepared.ok()) << prepared;
  }
  void TearDown() override {
    for (auto& l : FindLabelled(owner_)) ::kill(static_cast<pid_t>(l.proc.pid), SIGKILL);  // a failed test's leftovers
    if (provider_) {
      (void)provider_->CleanupCluster(cluster_);
      provider_->Release();
    }
    std::system(("rm -rf " + dir_).c_str());
  }

  // An instance of this test's installation (one state dir), team ml.
  LocalProviderOptions Options() const {
    LocalProviderOptions o;
    o.state_dir = dir_ + "/state";
    o.runtime_dir = dir_ + "/run";
    o.owner = owner_;
    o.team = "ml";
    if (::geteuid() == 0) o.run_as = "nobody";  // a job is never root
    return o;
  }

  // This test's processes (zombies excluded) in the session `sid`.
  std::vector<LabelledProcess> InSession(int64_t sid) const {
    std::vector<LabelledProcess> out;
    for (auto& l : FindLabelled(owner_)) {
      if (l.proc.sid == sid) out.push_back(l);
    }
    return out;
  }

  std::string dir_, owner_;
  std::unique_ptr<NodeProvider> provider_;
  v1::Cluster cluster_;
};

// Checked as fast as the provider can look, so that some of the looks land
// while the job is exiting: each of the jobs still ends with its own code.
TEST_F(LocalProviderTest, AJobThatEndsWhileItIsCheckedKeepsItsExitCode) {
  for (int i = 0; i < 300; ++i) {
    v1::Job job;
    job.set_id("j" + std::to_string(i));
    const int code = i % 3 == 0 ? 0 : 3 + i % 5;
    job.set_entrypoint(code == 0 ? "true" : "exit " + std::to_string(code));
    auto submitted = provider_->SubmitJob(cluster_, job);
    ASSERT_TRUE(submitted.ok()) << submitted;
    ASSERT_GT(job.pid(), 0);
    JobStatus s;
    for (int looks = 0; looks < 10'000'000; ++looks) {
      s = provider_->CheckJob(cluster_, job);
      if (s.state != "RUNNING") break;
    }
    ASSERT_EQ(s.exit_code, code) << "job " << i << ": " << s.state << " " << s.message;
    EXPECT_EQ(s.state, code == 0 ? "SUCCEEDED" : "FAILED") << "job " << i;
    // Asked again, the same answer (the provider keeps what it reaped).
    EXPECT_EQ(provider_->CheckJob(cluster_, job).exit_code, code) << "job " << i;
  }
}

// The job's RUNNING record was lost (a failed write; the state comes back
// PENDING, no pid): submitted again, it is the same process, run once, and
// its exit code is still read. A later instance of the installation that
// finds the job started (its log) refuses to run it a second time.
TEST_F(LocalProviderTest, AJobWhoseStartWasNotRecordedIsNeverRunTwice) {
  const std::string runs = dir_ + "/state/clusters/" + cluster_.id() + "/runs";
  v1::Job job;
  job.set_id("once");
  job.set_entrypoint("echo run >> \"$HOME/runs\"; exit 4");
  ASSERT_TRUE(provider_->SubmitJob(cluster_, job).ok());
  v1::Job reloaded = job;
  reloaded.clear_pid();
  reloaded.clear_start_ticks();
  auto again = provider_->SubmitJob(cluster_, reloaded);
  ASSERT_TRUE(again.ok()) << again;
  EXPECT_EQ(reloaded.pid(), job.pid());
  JobStatus s;
  for (int looks = 0; looks < 1000; ++looks) {
    s = provider_->CheckJob(cluster_, reloaded);
    if (s.state != "RUNNING") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(s.state, "FAILED");
  EXPECT_EQ(s.exit_code, 4);
  std::ifstream in(runs);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all, "run\n");

  auto later = NewLocalProvider(Options());  // the same installation (state dir), another instance
  ASSERT_TRUE(later.ok()) << later.status();
  v1::Job lost = job;
  lost.clear_pid();
  lost.clear_start_ticks();
  auto refused = (*later)->SubmitJob(cluster_, lost);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_EQ(lost.pid(), 0);
}

// A node that started a daemon and ended: the controller stops what its
// session left behind (reconcile.cc, ObserveNodes), after the provider has
// reaped the node's own process.
TEST_F(LocalProviderTest, WhatAnEndedNodeLeftInItsSessionIsStopped) {
  auto* group = cluster_.mutable_spec()->add_node_groups();
  group->set_name("workers");
  group->set_count(1);
  for (const char* arg : {"/bin/sh", "-c", "sleep 600 & exit 0"}) group->add_command(arg);
  v1::Node node;
  node.set_id(cluster_.id() + "-workers-0");
  node.set_group("workers");
  auto started = provider_->StartNode(cluster_, node);
  ASSERT_TRUE(started.ok()) << started;
  NodeStatus s;
  for (int looks = 0; looks < 1000; ++looks) {
    s = provider_->CheckNode(cluster_, node);
    if (!s.alive) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_FALSE(s.alive);
  EXPECT_EQ(s.exit_code, 0);
  ASSERT_EQ(InSession(node.pid()).size(), 1u) << "the daemon runs on in the ended node's session";
  ASSERT_TRUE(provider_->StopNode(cluster_, node, true).ok());
  for (int i = 0; i < 500 && !InSession(node.pid()).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(InSession(node.pid()).empty()) << "the daemon outlived its node's stop";
}

}  // namespace
}  // namespace relay::lifecycle
