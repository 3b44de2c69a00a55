// The producing edge of every service: send a record, learn once whether the
// broker made it durable.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "prometheus/registry.h"
#include "relay/kafka/record.h"

namespace relay::kafka {

// Called exactly once per Send, on a producer-owned thread: OK means every
// in-sync replica has the record (acks=all). Must not block for long.
using DeliveryCallback = absl::AnyInvocable<void(absl::Status) &&>;

// Thread-safe.
class Producer {
 public:
  virtual ~Producer() = default;
  // Takes ownership of `record`. A failure to enqueue (local queue full,
  // producer closing) is reported through `done` too, never thrown.
  virtual void Send(Record record, DeliveryCallback done) = 0;
  // Waits until every record sent so far has had its callback, or timeout.
  virtual absl::Status Flush(std::chrono::milliseconds timeout) = 0;
  // False while no broker connection is up (for /readyz).
  virtual bool Connected() const = 0;
};

struct ProducerOptions {
  std::string bootstrap;                     // "host:port,host:port"
  std::string client_id = "relay";
  // Upper bound on the time from Send to the callback, retries included
  // (librdkafka message.timeout.ms). Past it the callback gets Unavailable.
  std::chrono::milliseconds delivery_timeout{5000};
  std::chrono::milliseconds linger{2};
  std::string compression = "lz4";
  int64_t queue_max_messages = 200'000;
  int64_t queue_max_kbytes = 512 * 1024;     // bounded memory for in-flight records
  int64_t message_max_bytes = 32 * 1024 * 1024;
  // How many times a record may be re-sent after the producer was recreated
  // because of a fatal (idempotence) error.
  int max_recreations_per_record = 3;
  std::map<std::string, std::string> extra;  // raw librdkafka properties, applied last
};

// Idempotent (enable.idempotence=true, acks=all) librdkafka producer.
// Errors are classified once, in kafka_errors.cc. When librdkafka raises a
// fatal error (librdkafka 2.0.2 can do so for idempotence sequence problems,
// e.g. OUT_OF_ORDER_SEQUENCE_NUMBER or a producer-id/epoch mismatch), the
// producer is recreated and every record it still held is sent again on the
// new one: nothing handed to Send is dropped because of it. Such a re-send
// may duplicate a record that the broker had already written; consumers
// deduplicate by the record's id (see docs/architecture.md).
absl::StatusOr<std::unique_ptr<Producer>> NewKafkaProducer(ProducerOptions options,
                                                          prometheus::Registry* metrics);

// For fault-injection tests only: makes the producer's current librdkafka
// handle raise a fatal error, as librdkafka does on idempotence failures.
void TestRaiseFatalError(Producer* producer);

}  // namespace relay::kafka
