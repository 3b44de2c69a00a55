// Test double for kafka::Admin: topic descriptions the test sets.
#pragma once

#include <map>
#include <mutex>

#include "relay/kafka/admin.h"

namespace relay::kafka::testing {

class FakeAdmin final : public Admin {
 public:
  // A topic as the real cluster would describe it; max.message.bytes given.
  void SetTopic(const std::string& name, int partitions, int64_t max_message_bytes) {
    std::lock_guard lock(mu_);
    topics_[name] = TopicDescription{name, partitions, 1, {{"max.message.bytes", std::to_string(max_message_bytes)}}};
  }
  // Sets one config of a topic SetTopic described.
  void SetConfig(const std::string& name, const std::string& key, const std::string& value) {
    std::lock_guard lock(mu_);
    topics_[name].configs[key] = value;
  }
  void RemoveTopic(const std::string& name) {
    std::lock_guard lock(mu_);
    topics_.erase(name);
  }
  void SetUnavailable(bool unavailable) {
    std::lock_guard lock(mu_);
    unavailable_ = unavailable;
  }
  absl::StatusOr<TopicDescription> DescribeTopic(const std::string& topic, std::chrono::milliseconds) override {
    std::lock_guard lock(mu_);
    if (unavailable_) return absl::UnavailableError("metadata of topic " + topic + ": _TRANSPORT: broker down");
    auto it = topics_.find(topic);
    if (it == topics_.end()) return absl::NotFoundError("topic " + topic + " does not exist");
    return it->second;
  }

 private:
  std::mutex mu_;
  std::map<std::string, TopicDescription> topics_;
  bool unavailable_ = false;
};

// An Admin that forwards to one the test owns (see BorrowedProducer).
class BorrowedAdmin final : public Admin {
 public:
  explicit BorrowedAdmin(Admin* target) : target_(target) {}
  absl::StatusOr<TopicDescription> DescribeTopic(const std::string& topic,
                                                 std::chrono::milliseconds timeout) override {
    return target_->DescribeTopic(topic, timeout);
  }

 private:
  Admin* target_;
};

}  // namespace relay::kafka::testing
