// The consuming half that relay-dispatch, relay-collector and relay-stats
// share: one group consumer on a thread of its own, handing batches to the
// service's handler, with its /readyz checks and its way of failing. A
// service declares its topics (ConsumerOptions), its handler and any
// readiness checks of its own; this is the rest.
#pragma once

#include <atomic>
#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "relay/kafka/consumer.h"
#include "relay/kafka/producer.h"
#include "relay/service/service.h"

namespace relay::service {

// /readyz check "kafka": the producer has a broker connection.
void AddProducerReadiness(Runtime& runtime, const kafka::Producer* producer);

// The options every group consumer of the suite starts from: the shared
// Kafka client settings (bootstrap, client id), the group and its topics.
kafka::ConsumerOptions GroupOptions(const kafka::ProducerOptions& kafka, std::string group_id,
                                    std::vector<std::string> topics);

// Sets the group's session timeout and a heartbeat a third of it (at least
// 1 s), as librdkafka properties.
void SetSessionTimeout(kafka::ConsumerOptions& options, std::chrono::milliseconds session_timeout);

class GroupConsumer {
 public:
  // Makes the consumer through the runtime's factories (tests swap them);
  // `dead_letters` writes its poison records and must outlive it. Adds the
  // /readyz checks "kafka" (AddProducerReadiness on `dead_letters`) and
  // "consumer" (the group's health). Nothing is consumed before Start.
  static absl::StatusOr<std::unique_ptr<GroupConsumer>> Open(Runtime& runtime, kafka::ConsumerOptions options,
                                                             kafka::Producer* dead_letters);
  ~GroupConsumer();  // Stop()

  // Hands batches to `handler` on a thread of its own until Stop. A loop
  // that ends with an error (a fatal client error, a dead-letter topic
  // refusing records) calls Runtime::Fatal("consumer", why): the process
  // must not look alive without its consumer. Once.
  void Start(kafka::BatchOptions batches, kafka::BatchHandler handler);

  // Any thread but the consuming one: the batch in hand finishes, offsets
  // are committed, the thread is joined. Idempotent.
  void Stop();

  kafka::Consumer& consumer() { return *consumer_; }

 private:
  GroupConsumer(Runtime& runtime, std::unique_ptr<kafka::Consumer> consumer)
      : runtime_(runtime), consumer_(std::move(consumer)) {}

  Runtime& runtime_;
  std::unique_ptr<kafka::Consumer> consumer_;
  std::thread thread_;
  std::atomic<bool> stopped_{false};
};

}  // namespace relay::service
