// What dispatch remembers of the writes it made, so a restart, a rebalance
// or an operator's replay of github.webhooks never makes a completed write
// again. Each input partition has its ledger in the same partition of the
// compacted topic dispatch.ledger (input partition % ledger partitions), so
// the member that owns an input partition reads exactly its ledger at
// assignment and is the only one writing it. States: STARTED just before a
// write goes out, DONE when GitHub accepted it, FAILED when it failed for
// good. STARTED without an end means the call was in flight at a crash: it
// is made again (a repeat, counted), because GitHub's dispatch API has no
// idempotency key. Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "relay/base/clock.h"
#include "relay/kafka/producer.h"
#include "relay/kafka/reader.h"
#include "relay/v1/github.pb.h"

namespace relay::dispatch {

inline constexpr char kLedgerSchema[] = "relay.v1.LedgerEntry";

class Ledger {
 public:
  using State = v1::LedgerEntry::State;

  Ledger(std::string topic, int partitions, kafka::Producer* producer, kafka::TopicReader* reader, const Clock* clock)
      : topic_(std::move(topic)), partitions_(partitions), producer_(producer), reader_(reader), clock_(clock) {}

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

  size_t size() const;

 private:
  int32_t LedgerPartition(const kafka::TopicPartition& input) const { return input.partition % partitions_; }
  kafka::Record Entry(const kafka::TopicPartition& input, const v1::GitHubRequest& request, State state) const;
  void Remember(const kafka::TopicPartition& input, const std::string& id, State state);

  std::string topic_;
  int partitions_;
  kafka::Producer* producer_;
  kafka::TopicReader* reader_;
  const Clock* clock_;
  mutable std::mutex mu_;
  std::map<kafka::TopicPartition, std::map<std::string, State>> states_;
};

// Sends a record and waits for its delivery result.
absl::Status SendAndWait(kafka::Producer* producer, kafka::Record record);

}  // namespace relay::dispatch
