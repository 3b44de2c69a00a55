// What keeps a webhook record read again from acting again: where the line
// is between a record that may ask for new writes and facts and one that
// may not (NotFresh), and the label facts already published (LabelFacts).
//
// LabelFacts: the newest relay.pr_labels fact published for each PR, as
// dispatch knows it: read back from the topic when dispatch takes github.webhooks
// partitions, and kept as it publishes. Dispatch publishes a fact only
// when it is newer by event time (relay/github/event_time.h) than that:
// the topic is compacted, so the record of a PR written last is the one
// that survives, and an old event's fact written after a newer one (a
// redelivery that came late, a dead letter sent back) would roll the
// PR's labels back for good. Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "relay/github/event_time.h"
#include "relay/kafka/record.h"
#include "relay/kafka/reader.h"
#include "relay/v1/dispatch.pb.h"

namespace relay::dispatch {

// "<upstream repo, lower case>#<number>": a PR's key in the tables of
// facts (GitHub's names compare case-insensitively).
std::string PullRequestKey(const v1::PullRequestLabels& fact);
// The fact's place in the order of events.
github::EventTime EventTimeOf(const v1::PullRequestLabels& fact);

// Why a webhook record may ask for no new write and publish no fact ("" when
// it may; services/dispatch/README.md, "Dispatch"):
//   "replayed"   a copy made by `relayctl replay` (relay-replayed-from): its
//                original asked for everything already;
//   "read_again" below `handled_through`, the offset its partition was
//                handled through: read again by a group moved back in time;
//   "stale"      received by intake (`received_at_unix_ms`; 0: the Kafka
//                record's time) longer ago than the ledger is sure to
//                remember (CheckWithinLedgerMemory, whose message goes to
//                `*detail`): its writes could be repeated unseen.
std::string NotFresh(const kafka::ConsumedRecord& record, int64_t received_at_unix_ms, int64_t handled_through,
                     int64_t now_unix_ms, int64_t ledger_retention_ms, std::string* detail);

class LabelFacts {
 public:
  // `reader` is borrowed (used on the consuming thread only).
  LabelFacts(std::string topic, kafka::TopicReader* reader) : topic_(std::move(topic)), reader_(reader) {}

  // Reads every fact of the topic; the newest of each PR is kept.
  absl::Status Load();
  // True when `fact` is newer than every fact of its PR published before:
  // it is then the newest, and may be published. False for an older or an
  // equal one (the same event again).
  bool Offer(const v1::PullRequestLabels& fact);
  size_t size() const;

 private:
  std::string topic_;
  kafka::TopicReader* reader_;
  mutable std::mutex mu_;
  std::map<std::string, github::EventTime> newest_;
};

}  // namespace relay::dispatch
