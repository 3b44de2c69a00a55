#include "relay/service/group_consumer.h"

#include <algorithm>

#include "relay/base/status.h"

namespace relay::service {

void AddProducerReadiness(Runtime& runtime, const kafka::Producer* producer) {
  runtime.AddReadinessCheck("kafka", [producer] {
    return producer->Connected() ? absl::OkStatus() : absl::UnavailableError("no broker connection");
  });
}

kafka::ConsumerOptions GroupOptions(const kafka::ProducerOptions& kafka, std::string group_id,
                                    std::vector<std::string> topics) {
  kafka::ConsumerOptions o;
  o.bootstrap = kafka.bootstrap;
  o.client_id = kafka.client_id;
  o.group_id = std::move(group_id);
  o.topics = std::move(topics);
  return o;
}

void SetSessionTimeout(kafka::ConsumerOptions& options, std::chrono::milliseconds session_timeout) {
  options.extra["session.timeout.ms"] = std::to_string(session_timeout.count());
  options.extra["heartbeat.interval.ms"] = std::to_string(std::max<int64_t>(1000, session_timeout.count() / 3));
}

absl::StatusOr<std::unique_ptr<GroupConsumer>> GroupConsumer::Open(Runtime& runtime, kafka::ConsumerOptions options,
                                                                   kafka::Producer* dead_letters) {
  RELAY_ASSIGN_OR_RETURN(std::unique_ptr<kafka::Consumer> consumer,
                         runtime.factories().consumer(std::move(options), dead_letters, &runtime.metrics()));
  AddProducerReadiness(runtime, dead_letters);
  runtime.AddReadinessCheck("consumer", [c = consumer.get()] { return c->Health(); });
  return std::unique_ptr<GroupConsumer>(new GroupConsumer(runtime, std::move(consumer)));
}

GroupConsumer::~GroupConsumer() { Stop(); }

void GroupConsumer::Start(kafka::BatchOptions batches, kafka::BatchHandler handler) {
  thread_ = std::thread([this, batches, handler = std::move(handler)]() mutable {
    absl::Status ended = consumer_->RunBatches(batches, std::move(handler));
    if (!ended.ok()) runtime_.Fatal("consumer", ended);
  });
}

void GroupConsumer::Stop() {
  if (stopped_.exchange(true)) return;
  consumer_->Stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace relay::service
