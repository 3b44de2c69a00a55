// The cut-over of github.webhooks from repository keys to ordered keys
// (relay/github/webhook_key.h) in a running deployment, where the topic
// still holds records keyed the old way, some not yet handled.
//
// Dispatch needs a pull request's events, and a ref's pushes, in order. Keyed
// by repository they are all in one partition; keyed the new way, a PR's
// later events are in another partition than its earlier ones. So a record
// with ordered keys (header relay-keys) is handled only once the group has
// handled, in every partition, every record with repository keys that came
// before the cut-over: until then its partition is held there
// (kafka::Batch::Hold), which stores what came before it. Per partition
// that is decided from the group's committed offset (PartitionPassed):
// the group is at an ordered record (it handled everything before; the
// holders sit exactly there, so holders never wait on each other), or it
// is at the end and the last record is ordered, or it is at the end and no
// intake can still write repository keys (kCutoverBound after the instant
// intake switched, relay-keys-from). An ordered record counts only when it
// is of this switch: its timestamp at most kCutoverBound before the instant
// (a deployment switched back to repository keys and then to ordered keys
// again has older ones in its partitions; set intake.record_keys_from, and
// leave more than kCutoverBound between the two).
//
// What is left: a record with repository keys appended after an ordered one
// of its partition (an intake whose clock is behind, within the bound) is
// handled after the cut-over, like any later record. Once passed, the
// result is kept for the process; a new process checks again (cheap: the
// committed offsets and one or two records per partition). Not thread-safe:
// the consuming thread's.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "relay/base/clock.h"
#include "relay/kafka/record.h"

namespace relay::dispatch {

// How long after the switch instant intake may still append a record keyed
// the old way: hosts' clock skew plus a record's re-sends within intake's
// kafka.delivery_timeout (5 s by default), with room to spare.
inline constexpr std::chrono::milliseconds kCutoverBound{std::chrono::minutes(2)};

// Where the group is in one partition of the webhooks topic.
struct PartitionProgress {
  int64_t position = 0;  // the group's committed offset (the oldest retained when none)
  int64_t end = 0;       // the partition's end offset
  // Whether the record at `position` / just before it carries ordered keys;
  // nullopt: there is none (the end; the start of what is retained).
  std::optional<bool> next_ordered;
  std::optional<bool> previous_ordered;
  // Those records' Kafka timestamps (ms): an ordered record much older than
  // the switch is of an earlier one (ordered, rolled back, ordered again).
  int64_t next_timestamp_ms = 0;
  int64_t previous_timestamp_ms = 0;
};

// True when the group has handled every record of the partition keyed by
// repository that came before the cut-over (see the file comment).
bool PartitionPassed(const PartitionProgress& p, int64_t now_unix_ms, int64_t keys_from_unix_ms);

// True for a record intake keyed the new way; *keys_from: its relay-keys-from.
bool HasOrderedKeys(const kafka::ConsumedRecord& record, int64_t* keys_from);

// Reads the group's progress in every partition of the topic.
using ProgressSource = std::function<absl::StatusOr<std::map<int32_t, PartitionProgress>>()>;

// The progress of `group` in `topic` from the broker: its committed offsets,
// the partitions' offsets, and the records there.
ProgressSource KafkaProgress(std::string bootstrap, std::string topic, std::string group);

class KeyCutover {
 public:
  // `progress` is called at most every `recheck` while records wait.
  KeyCutover(ProgressSource progress, const Clock* clock, std::chrono::milliseconds recheck,
             prometheus::Registry* metrics);

  // True when `record` may be handled now: it is keyed by repository, or
  // the cut-over has passed. False: hold its partition there.
  bool MayHandle(const kafka::ConsumedRecord& record);
  bool passed() const { return passed_from_.has_value(); }

 private:
  ProgressSource progress_;
  const Clock* clock_;
  std::chrono::milliseconds recheck_;
  // The latest switch instant checked and passed: records of it, or of an
  // earlier switch, go.
  std::optional<int64_t> passed_from_;
  std::optional<std::chrono::steady_clock::time_point> checked_at_;
  prometheus::Counter& holds_;
};

}  // namespace relay::dispatch
