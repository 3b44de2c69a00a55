// Issue 29, item 1, on the real broker: dispatch's STARTED marks fenced by
// the consumer group (KIP-447). On demand (ctest label `chaos`, with the
// fault-injection run): run alone it passed every time; inside the
// dispatch_it_test binary, after its other tests, the group's rebalances
// after the stopped owner wakes (its consumer thread held 30 s in a batch)
// did not settle within the test's 180 s twice, and CI cannot carry a test
// that does that. The stack and fixture: dispatch_it_support.h.
#include "dispatch_it_support.h"

namespace relay::dispatch_it {
namespace {

// Issue 29, item 1: an owner that lost its partitions without knowing it (a
// process stopped past its session timeout: to the group it is gone, to
// itself nothing happened) wakes up with writes queued and budget in hand.
// Its STARTED marks are committed in transactions that carry its stale
// group membership, so the coordinator refuses them and it makes no call;
// the new owner made everything, and every call made twice is one the new
// owner knew of (marked repeated): 0 unmarked repeats.
TEST_F(DispatchIT, AnOwnerFencedByTheGroupMakesNoCallTheNewOwnerDoesNotKnowOf) {
  DispatchStack stack("zombie");
  stack.SetAllowlist(kTenRepos);
  // 100 ms a call, 4 at once: the owner has a backlog when it is stopped.
  stack.Fake("POST", "/_fake/config", R"({"latency_ms":100,"rate_limit":{"limit":1000000,"window_seconds":3600}})");
  // Its consumer thread waits up to 30 s for a batch's writes before it
  // polls again, so after waking it learns late that the group moved on
  // (as an instance cut off from its coordinator does), while its workers
  // go on: without the fence they make calls nobody knows of.
  std::map<std::string, std::string> env = {{"RELAY_KAFKA_SESSION_TIMEOUT", "6s"},
                                            {"RELAY_GITHUB_MAX_CONCURRENCY", "4"},
                                            {"RELAY_DISPATCH_BATCH_WAIT", "30s"}};
  uint16_t p1 = stack.StartDispatch(1, env), p2 = stack.StartDispatch(2, env);
  ASSERT_NE(p1, 0) << stack.Log(1);
  ASSERT_NE(p2, 0) << stack.Log(2);
  auto assigned = [&](int n) { return stack.Log(n).find("partitions assigned") != std::string::npos; };
  ASSERT_TRUE(relay::testing::WaitFor([&] { return assigned(1) && assigned(2); }, 60s));
  Payload push = APush(corpus_);
  std::string run = "zombie-" + Unique() + "-";
  constexpr int kEvents = 120;  // x 10 repos
  for (int i = 0; i < kEvents; ++i) stack.Produce(push, run + std::to_string(i));
  stack.Flush();
  auto made = [&] { return stack.Fake("GET", "/_fake/stats").at("dispatches").as_int64(); };
  ASSERT_TRUE(relay::testing::WaitFor([&] { return made() >= 60; }, 60s));
  // The records share a key: one member owns their partition.
  int owner = Metric(p1, "relay_dispatch_dispatches_total{level=\"L2\"}") > 0 ? 1 : 2;
  uint16_t owner_port = owner == 1 ? p1 : p2, other_port = owner == 1 ? p2 : p1;
  stack.dispatch(owner).Signal(SIGSTOP);
  // The other member takes the partition after the session timeout and works.
  double before = Metric(other_port, "relay_dispatch_dispatches_total{level=\"L2\"}");
  bool took_over = relay::testing::WaitFor(
      [&] { return Metric(other_port, "relay_dispatch_dispatches_total{level=\"L2\"}") > before + 20; }, 60s);
  stack.dispatch(owner).Signal(SIGCONT);
  ASSERT_TRUE(took_over) << stack.Log(owner == 1 ? 2 : 1);
  ASSERT_LT(made(), kEvents * 10) << "finished before the owner woke up";
  stack.WaitForDispatches(kEvents * 10, 180s, 3s);
  // Calls per write (one idempotency key each), and how many of the
  // write's records say it was made again knowingly.
  std::map<std::string, int> calls;
  for (const Call& c : DispatchCalls(stack)) ++calls[c.delivery + " " + c.repo];
  std::map<std::string, int> marked;
  for (const auto& r : TopicRecords("relay.dispatches", run)) {
    v1::DispatchRecord d;
    ASSERT_TRUE(d.ParseFromString(r.value));
    if (d.repeated()) ++marked[d.delivery_id() + " " + d.downstream_repo()];
  }
  int repeats = 0, unmarked = 0;
  for (const auto& [write, n] : calls) {
    if (write.rfind(run, 0) != 0) continue;
    repeats += n - 1;
    unmarked += std::max(0, n - 1 - marked[write]);
  }
  EXPECT_EQ(calls.size(), static_cast<size_t>(kEvents * 10));
  EXPECT_EQ(unmarked, 0) << "the stopped owner made calls its successor did not know of (" << repeats << " repeats)";
  EXPECT_GE(Metric(owner_port, "relay_kafka_transactions_total{result=\"group_fenced\"}"), 1)
      << "the stopped owner never tried a mark after waking: the test proved nothing\n" << stack.Log(owner);
  std::cout << "repeats " << repeats << " (all marked), the woken owner's refused marks: "
            << Metric(owner_port, "relay_kafka_transactions_total{result=\"group_fenced\"}") << std::endl;
}

}  // namespace
}  // namespace relay::dispatch_it
