#include "relay/kafka/testing/fake_consumer.h"

#include <atomic>
#include <map>
#include <set>
#include <thread>

#include "consumer_loop.h"

namespace relay::kafka::testing {
namespace {


class FakeSource final : public internal::Source {
 public:
  FakeSource(FakeBroker* broker, ConsumerOptions options) : broker_(broker), options_(std::move(options)) {
    for (const auto& topic : options_.topics) {
      auto n = broker_->Partitions(topic);
      for (int32_t p = 0; n.ok() && p < *n; ++p) {
        int64_t committed = broker_->Committed(options_.group_id, topic, p);
        int64_t start = committed >= 0 ? committed
                        : options_.auto_offset_reset == "latest" ? broker_->EndOffset(topic, p)
                                                                  : 0;
        position_[{topic, p}] = start;
      }
    }
  }

  std::optional<ConsumedRecord> Poll(std::chrono::milliseconds timeout) override {
    if (!assigned_) {
      // The one member owns every partition from the first poll on.
      assigned_ = true;
      std::vector<TopicPartition> all;
      for (const auto& [tp, position] : position_) all.push_back(tp);
      if (on_assign_) on_assign_(all);
    }
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      // Round-robin over the partitions that are not paused.
      for (size_t i = 0; i < position_.size(); ++i) {
        auto it = std::next(position_.begin(), static_cast<long>((next_ + i) % position_.size()));
        if (paused_.count(it->first)) continue;
        auto records = broker_->Read(it->first.topic, it->first.partition, it->second, 1);
        if (records.empty()) continue;
        it->second = records[0].offset + 1;
        next_ = (next_ + i + 1) % position_.size();
        return std::move(records[0]);
      }
      auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return std::nullopt;
      broker_->WaitForAppend(std::min<std::chrono::milliseconds>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now), std::chrono::milliseconds(20)));
    }
  }
  absl::Status Fatal() override { return broker_->ConsumerFatal(options_.group_id); }
  absl::Status Degraded() override { return absl::OkStatus(); }
  void Store(const TopicPartition& tp, int64_t next_offset) override {
    broker_->Commit(options_.group_id, tp.topic, tp.partition, next_offset);
  }
  absl::Status Rewind(const TopicPartition& tp, int64_t offset) override {
    auto it = position_.find(tp);
    if (it == position_.end()) return absl::FailedPreconditionError("partition not assigned");
    it->second = offset;
    return absl::OkStatus();
  }
  void Pause(const TopicPartition& tp) override { paused_.insert(tp); }
  void Resume(const TopicPartition& tp) override { paused_.erase(tp); }
  absl::Status Close() override { return absl::OkStatus(); }

 private:
  FakeBroker* broker_;
  ConsumerOptions options_;
  std::map<TopicPartition, int64_t> position_;
  std::set<TopicPartition> paused_;
  size_t next_ = 0;
  bool assigned_ = false;
};

}  // namespace

std::unique_ptr<Consumer> NewFakeConsumer(FakeBroker* broker, ConsumerOptions options, Producer* dead_letters,
                                          prometheus::Registry* metrics) {
  internal::LoopOptions loop = internal::LoopOptionsFrom(options);
  return std::make_unique<internal::LoopConsumer>(std::make_unique<FakeSource>(broker, std::move(options)), loop,
                                                  dead_letters, internal::RegistryOrOwn(metrics));
}

absl::StatusOr<std::map<int32_t, int64_t>> FakeTopicReader::ReadToEnd(const std::string& topic,
                                                                      const std::vector<int32_t>& wanted,
                                                                      ReadCallback callback) {
  auto n = broker_->Partitions(topic);
  if (!n.ok()) return n.status();
  std::vector<int32_t> partitions = wanted;
  if (partitions.empty()) {
    for (int32_t p = 0; p < *n; ++p) partitions.push_back(p);
  }
  std::map<int32_t, int64_t> end;
  for (int32_t p : partitions) end[p] = broker_->EndOffset(topic, p);
  for (int32_t p : partitions) {
    for (const auto& r : broker_->Read(topic, p, 0, static_cast<size_t>(end[p]))) {
      if (absl::Status s = callback(r); !s.ok()) return s;
    }
  }
  return end;
}

namespace {

class FakeFollower final : public Follower {
 public:
  FakeFollower(const FakeBroker* broker, FollowerOptions options, FollowCallback callback)
      : broker_(broker), options_(std::move(options)), callback_(std::move(callback)) {
    thread_ = std::thread([this] { Run(); });
  }
  ~FakeFollower() override {
    stop_ = true;
    thread_.join();
  }
  bool CaughtUp() const override { return caught_up_.load(); }
  absl::Status Health() const override { return absl::OkStatus(); }

 private:
  void Run() {
    std::map<int32_t, int64_t> next;       // partition -> next offset
    std::map<int32_t, int64_t> start_end;  // the end of each partition when first seen
    while (!stop_) {
      auto n = broker_->Partitions(options_.topic);
      if (!n.ok()) {
        broker_->WaitForAppend(std::chrono::milliseconds(20));
        continue;
      }
      const bool first_look = next.empty();
      for (int32_t p = 0; p < *n; ++p) {
        if (next.count(p)) continue;
        int64_t end = broker_->EndOffset(options_.topic, p);
        // Partitions added later are followed from their start.
        next[p] = (options_.from_beginning || !first_look) ? 0 : end;
        if (first_look && options_.from_unix_ms > 0) {
          next[p] = end;
          for (const auto& r : broker_->Read(options_.topic, p, 0, static_cast<size_t>(end))) {
            if (r.timestamp_ms >= options_.from_unix_ms) {
              next[p] = r.offset;
              break;
            }
          }
        }
        if (first_look) start_end[p] = end;
      }
      for (auto& [p, offset] : next) {
        for (const auto& r : broker_->Read(options_.topic, p, offset, 1000)) {
          callback_(r);
          offset = r.offset + 1;
        }
      }
      if (!caught_up_) {
        bool all = true;
        for (const auto& [p, end] : start_end) all = all && next[p] >= end;
        caught_up_ = all;
      }
      broker_->WaitForAppend(std::chrono::milliseconds(20));
    }
  }

  const FakeBroker* broker_;
  const FollowerOptions options_;
  const FollowCallback callback_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> caught_up_{false};
  std::thread thread_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Follower>> NewFakeFollower(const FakeBroker* broker, FollowerOptions options,
                                                          FollowCallback callback) {
  return std::make_unique<FakeFollower>(broker, std::move(options), std::move(callback));
}

}  // namespace relay::kafka::testing
