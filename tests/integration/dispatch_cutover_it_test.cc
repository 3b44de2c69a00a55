// The key cut-over of github.webhooks on the real broker (issue 29, item 2;
// services/dispatch/include/relay/dispatch/key_cutover.h): a pull request's
// events keyed by repository in several partitions, not yet handled (their
// writes slowed by a downstream answering 503 at first), and its next
// events keyed the new way in another partition. The new-keyed records wait
// until every old-keyed one is handled: their dispatches reach GitHub only
// after every old one was answered (without the hold they go at once);
// once the cut-over has passed, new-keyed records are not held again, and a
// delivery recorded under its old key and redelivered under its new one
// (another partition, another ledger) is not dispatched twice. The stack and
// fixture: dispatch_it_support.h.
#include "dispatch_it_support.h"
#include "relay/github/webhook_key.h"
#include "relay/kafka/cluster_admin.h"

namespace relay::dispatch_it {
namespace {

class DispatchCutoverIT : public DispatchIT {
 protected:
  // A webhook record as intake makes it, to `partition`; keyed the new way
  // (relay-keys headers, switched `keys_from_ms`) when `ordered`.
  void Produce(kafka::Producer& producer, const DispatchStack& stack, const Payload& p, const std::string& delivery,
               int32_t partition, bool ordered, int64_t keys_from_ms) {
    v1::WebhookRecord r;
    r.set_delivery_id(delivery);
    r.set_event(p.event);
    r.set_action("opened");
    r.set_repository(stack.upstream());
    r.set_body(p.body);
    auto digest = Sha256(p.body);
    r.set_body_sha256(digest.data(), digest.size());
    r.set_content_type("application/json");
    r.set_received_at_unix_ms(NowMs());
    kafka::Record record{"github.webhooks", ordered ? stack.upstream() + "#7" : stack.upstream(), r.SerializeAsString(),
                         {{"relay-schema", "relay.v1.WebhookRecord"}, {"relay-delivery-id", delivery}}};
    if (ordered) {
      record.headers.push_back({github::kWebhookKeysHeader, github::kOrderedKeysVersion});
      record.headers.push_back({github::kWebhookKeysFromHeader, std::to_string(keys_from_ms)});
    }
    record.partition = partition;
    EXPECT_TRUE(kafka::SendAndWait(producer, std::move(record)).ok());
  }
};

TEST_F(DispatchCutoverIT, NewKeyedRecordsWaitUntilEveryOldKeyedRecordIsHandled) {
  DispatchStack stack("cutover");
  // Every event fans out to both; it-org/slow answers 503 to its first 20
  // calls, so the old-keyed events' writes take a few retries (seconds).
  stack.SetAllowlist("L2: [it-org/cut, it-org/slow]\n");
  stack.Fake("POST", "/_fake/faults", R"({"path":"^/repos/it-org/slow/dispatches$","status":503,"count":20})");
  auto opened = Find(corpus_, "pull_request", "opened");
  ASSERT_FALSE(opened.empty());
  kafka::ProducerOptions po;
  po.bootstrap = testing::FixtureBootstrap();
  auto producer = std::move(*kafka::NewKafkaProducer(po, nullptr));
  // Switched long enough ago that no intake can still write old keys: only
  // the records in the topic decide.
  const int64_t keys_from = NowMs() - 10 * 60 * 1000;
  // Delivery ids of this run only (a write's id is its delivery's, and the
  // broker of a test directory keeps the ledger of earlier runs).
  const std::string run = "cut" + Unique() + "-";
  // The PR's first new-keyed events in one partition, not the one its
  // repository key gives (`old_partition`); its old-keyed ones in the five
  // others (as under an intake clock a little behind).
  const int32_t old_partition = kafka::KeyPartition(stack.upstream(), 6);
  ASSERT_GE(old_partition, 0);
  const int32_t new_partition = (old_partition + 1) % 6;
  // The group is caught up to here, as a running deployment's would be (the
  // broker of a test directory keeps earlier runs' records, keyed both ways).
  {
    auto admin = kafka::NewClusterAdmin(testing::FixtureBootstrap(), 10s);
    ASSERT_TRUE(admin.ok()) << admin.status();
    auto offsets = (*admin)->Offsets("github.webhooks");
    ASSERT_TRUE(offsets.ok()) << offsets.status();
    std::map<kafka::TopicPartition, int64_t> ends;
    for (const auto& [p, o] : *offsets) ends[{"github.webhooks", p}] = o.high;
    ASSERT_TRUE((*admin)->SetCommittedOffsets(stack.group(), ends).ok());
  }
  Produce(*producer, stack, opened[0], run + "new-0", new_partition, true, keys_from);
  Produce(*producer, stack, opened[0], run + "new-1", new_partition, true, keys_from);
  for (int i = 0; i < 20; ++i) {
    Produce(*producer, stack, opened[0], run + "old-" + std::to_string(i), (new_partition + 1 + i % 5) % 6, false, 0);
  }
  // One more, where its repository key puts it (the producer's partitioner):
  // redelivered by hand after the cut-over, below.
  Produce(*producer, stack, opened[0], run + "old-dup", -1, false, 0);
  uint16_t port = stack.StartDispatch(1, {{"RELAY_GITHUB_MAX_CONCURRENCY", "4"}});
  ASSERT_NE(port, 0) << stack.Log(1);
  EXPECT_EQ(stack.WaitForDispatches(46, 90s), 46u) << stack.Log(1);

  int64_t last_old_answered = 0, first_new_sent = INT64_MAX;
  std::set<std::string> done;
  for (const Call& c : DispatchCalls(stack)) {
    if (c.delivery.rfind(run + "old-", 0) == 0) last_old_answered = std::max(last_old_answered, c.t1);
    if (c.delivery.rfind(run + "new-", 0) == 0) first_new_sent = std::min(first_new_sent, c.t0);
    if (c.status == 204) done.insert(c.delivery + " " + c.repo);
  }
  EXPECT_EQ(done.size(), 46u) << "every (delivery, repo) dispatched";
  EXPECT_GE(first_new_sent, last_old_answered)
      << "a new-keyed event reached GitHub before every old-keyed one of its PR was done";
  double holds = Metric(port, "relay_dispatch_cutover_holds_total");
  EXPECT_GE(holds, 1) << "held at the cut-over";
  EXPECT_THAT(stack.Log(1), HasSubstr("key cut-over passed"));
  // Once passed, new-keyed records flow without a hold.
  Produce(*producer, stack, opened[0], run + "new-2", new_partition, true, keys_from);
  EXPECT_EQ(stack.WaitForDispatches(48, 30s, 500ms), 48u);
  EXPECT_EQ(Metric(port, "relay_dispatch_cutover_holds_total"), holds);
  // The delivery recorded under its repository key before the cut-over,
  // redelivered (same id and body) under its new key in another partition:
  // the ledger of its old partition knows its writes, so none is made again.
  double skipped = Metric(port, "relay_dispatch_replays_skipped_total");
  Produce(*producer, stack, opened[0], run + "old-dup", new_partition, true, keys_from);
  Produce(*producer, stack, opened[0], run + "new-3", new_partition, true, keys_from);
  EXPECT_EQ(stack.WaitForDispatches(50, 30s, 1000ms), 50u) << "new-3 only";
  int dup_calls = 0;
  for (const Call& c : DispatchCalls(stack)) dup_calls += c.delivery == run + "old-dup" && c.status == 204;
  EXPECT_EQ(dup_calls, 2) << "dispatched again under its new key";
  EXPECT_EQ(Metric(port, "relay_dispatch_replays_skipped_total"), skipped + 2);
  stack.dispatch(1).Signal(SIGTERM);
  EXPECT_EQ(stack.dispatch(1).Wait(30s), 0) << stack.Log(1);
}

}  // namespace
}  // namespace relay::dispatch_it
