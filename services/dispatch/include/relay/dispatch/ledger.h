// What dispatch remembers of the writes it made, so a restart, a rebalance
// or an operator's replay of github.webhooks never makes a completed write
// again. Each input partition has its ledger in the same partition of the
// compacted topic dispatch.ledger (input partition % ledger partitions), so
// the member that owns an input partition reads exactly its ledger at
// assignment and is the only one writing it. States: STARTED just before a
// write goes out, DONE when GitHub accepted it, FAILED when it failed for
// good, SUPERSEDED when it was never sent because a newer head of its pull
// request went instead (scheduler.h). STARTED without an end means the call was in flight at a crash: it
// is made again (a repeat, counted), because GitHub's dispatch API has no
// idempotency key.
//
// It also keeps, per input partition, the offset below which every record
// was handled (a mark written after each batch of github.webhooks is
// recorded): a record read again below it, by a consumer group moved back
// in time, was fanned out the first time and asks for nothing new. The
// ledger forgets what is older than its retention (15 days): no record
// older than that, less kLedgerMargin, may be acted on again
// (CheckWithinLedgerMemory, applied by dispatch and by relayctl's redrive).
// Thread-safe.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "relay/base/clock.h"
#include "relay/kafka/admin.h"
#include "relay/kafka/producer.h"
#include "relay/kafka/reader.h"
#include "relay/v1/github.pb.h"

namespace relay::dispatch {

inline constexpr char kLedgerSchema[] = "relay.v1.LedgerEntry";

// What the bound on a record's age keeps below the ledger's retention: a
// clock ahead, a record read some time after intake received it.
inline constexpr std::chrono::hours kLedgerMargin{24};

// OK when a record whose event happened at `event_unix_ms` is young enough
// for the ledger to remember every write made for it: the ledger keeps an
// entry at least `ledger_retention_ms` from when it was written, which is
// after the event; so an event less than the retention less kLedgerMargin
// old is covered. FailedPrecondition saying how old it is and the bound
// otherwise. `ledger_retention_ms` <= 0: kept forever, always OK.
absl::Status CheckWithinLedgerMemory(int64_t event_unix_ms, int64_t now_unix_ms, int64_t ledger_retention_ms);

// How long a topic keeps a record (ms), from its effective configuration:
// retention.ms when cleanup.policy deletes; 0 (forever) when it only
// compacts (the latest entry of an id stays) or retention.ms is -1.
// InvalidArgument when retention.ms does not read as a number.
absl::StatusOr<int64_t> RetentionMs(const kafka::TopicDescription& topic);

class Ledger {
 public:
  using State = v1::LedgerEntry::State;

  // `started` writes the STARTED marks (dispatch's is transactional and
  // fenced by the consumer group: a mark it refuses means the write must
  // not go out); `producer` everything else.
  Ledger(std::string topic, int partitions, kafka::Producer* producer, kafka::Producer* started,
         kafka::TopicReader* reader, const Clock* clock)
      : topic_(std::move(topic)),
        partitions_(partitions),
        producer_(producer),
        started_(started),
        reader_(reader),
        clock_(clock) {}

  // Reads the ledger of newly owned input partitions (on the consuming
  // thread, before their records are handled).
  absl::Status Load(const std::vector<kafka::TopicPartition>& inputs);
  // Forgets partitions another member owns now.
  void Drop(const std::vector<kafka::TopicPartition>& inputs);

  // STATE_UNSPECIFIED when the id is unknown for that input partition.
  State Get(const kafka::TopicPartition& input, const std::string& request_id) const;
  // Records a state durably (waits for the broker's ack), then in memory.
  absl::Status Put(const kafka::TopicPartition& input, const v1::GitHubRequest& request, State state);
  // The same without waiting: `done` runs on the producer's thread.
  void PutAsync(const kafka::TopicPartition& input, const v1::GitHubRequest& request, State state,
                std::function<void(absl::Status)> done);

  // The offset below which every record of `input` was handled (0: none
  // known). Records below it are read again, not read for the first time.
  int64_t HandledThrough(const kafka::TopicPartition& input) const;
  // Records durably that every record of `input` below `next_offset` was
  // handled (waits for the broker's ack). A mark never moves back.
  absl::Status MarkHandled(const kafka::TopicPartition& input, int64_t next_offset);

  size_t size() const;

 private:
  int32_t LedgerPartition(const kafka::TopicPartition& input) const { return input.partition % partitions_; }
  kafka::Record Entry(const kafka::TopicPartition& input, const v1::GitHubRequest& request, State state) const;
  void Remember(const kafka::TopicPartition& input, const std::string& id, State state);

  std::string topic_;
  int partitions_;
  kafka::Producer* producer_;
  kafka::Producer* started_;
  kafka::TopicReader* reader_;
  const Clock* clock_;
  mutable std::mutex mu_;
  std::map<kafka::TopicPartition, std::map<std::string, State>> states_;
  std::map<kafka::TopicPartition, int64_t> handled_;
};

}  // namespace relay::dispatch
