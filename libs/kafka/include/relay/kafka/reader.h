// Reading a topic from its start to its end, for rebuilding state at start
// (a ledger, a state machine's table): no consumer group, nothing committed,
// every partition (or the ones asked for) assigned by hand.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "relay/kafka/record.h"

namespace relay::kafka {

// Called for each record, in offset order within a partition (partitions
// interleave). An error stops the read and is returned.
using ReadCallback = absl::FunctionRef<absl::Status(const ConsumedRecord&)>;

class TopicReader {
 public:
  virtual ~TopicReader() = default;
  // Number of partitions of `topic`; NotFound when it does not exist.
  virtual absl::StatusOr<int> Partitions(const std::string& topic) = 0;
  // Reads `partitions` of `topic` (every partition when empty) from the
  // oldest record retained up to the end offsets as they were when the call
  // began (records written meanwhile are not waited for). Returns those end
  // offsets (partition -> offset after the last record read), or an error:
  // the callback's, NotFound for a missing topic, DeadlineExceeded when the
  // end was not reached within the reader's timeout.
  virtual absl::StatusOr<std::map<int32_t, int64_t>> ReadToEnd(const std::string& topic,
                                                               const std::vector<int32_t>& partitions,
                                                               ReadCallback callback) = 0;
  // The record at `offset` of one partition (a state record whose offset
  // was kept, fetched again when its full form is needed). NotFound when
  // there is none there any more (compacted away: a later record of its
  // key exists) or past the end; Unavailable / DeadlineExceeded otherwise.
  virtual absl::StatusOr<ConsumedRecord> ReadAt(const std::string& topic, int32_t partition, int64_t offset) = 0;
};

struct ReaderOptions {
  std::string bootstrap;
  std::string client_id = "relay-reader";
  std::chrono::milliseconds timeout{60'000};  // per ReadToEnd
  std::map<std::string, std::string> extra;   // raw librdkafka properties
};

// Thread-compatible: one ReadToEnd at a time per reader.
absl::StatusOr<std::unique_ptr<TopicReader>> NewKafkaTopicReader(ReaderOptions options);

}  // namespace relay::kafka
