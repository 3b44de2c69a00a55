#include "relay/kafka/testing/fake_broker.h"

#include <functional>

namespace relay::kafka::testing {

void FakeBroker::CreateTopic(const std::string& topic, int partitions) {
  std::lock_guard lock(mu_);
  topics_[topic].resize(static_cast<size_t>(partitions));
}

absl::StatusOr<int> FakeBroker::Partitions(const std::string& topic) const {
  std::lock_guard lock(mu_);
  auto it = topics_.find(topic);
  if (it == topics_.end()) return absl::NotFoundError("topic " + topic + " does not exist");
  return static_cast<int>(it->second.size());
}

absl::StatusOr<std::pair<int32_t, int64_t>> FakeBroker::Append(const Record& record, int64_t timestamp_ms) {
  auto n = Partitions(record.topic);
  if (!n.ok()) return n.status();
  auto partition = static_cast<int32_t>(std::hash<std::string>()(record.key) % static_cast<size_t>(*n));
  auto offset = AppendTo(partition, record, timestamp_ms);
  if (!offset.ok()) return offset.status();
  return std::make_pair(partition, *offset);
}

absl::StatusOr<int64_t> FakeBroker::AppendTo(int32_t partition, const Record& record, int64_t timestamp_ms) {
  std::lock_guard lock(mu_);
  auto it = topics_.find(record.topic);
  if (it == topics_.end()) return absl::NotFoundError("topic " + record.topic + " does not exist");
  if (partition < 0 || static_cast<size_t>(partition) >= it->second.size()) {
    return absl::NotFoundError("topic " + record.topic + " has no partition " + std::to_string(partition));
  }
  auto& log = it->second[static_cast<size_t>(partition)];
  if (timestamp_ms == 0) timestamp_ms = clock_ ? clock_->UnixMillis() : SystemClock().UnixMillis();
  ConsumedRecord r{record.topic, partition, static_cast<int64_t>(log.size()), timestamp_ms,
                   record.key, record.value, record.headers};
  log.push_back(std::move(r));
  ++appends_;
  appended_.notify_all();
  return static_cast<int64_t>(log.size() - 1);
}

std::vector<ConsumedRecord> FakeBroker::Read(const std::string& topic, int32_t partition, int64_t from,
                                             size_t max) const {
  std::lock_guard lock(mu_);
  std::vector<ConsumedRecord> out;
  auto it = topics_.find(topic);
  if (it == topics_.end() || partition < 0 || static_cast<size_t>(partition) >= it->second.size()) return out;
  const auto& log = it->second[static_cast<size_t>(partition)];
  for (auto i = static_cast<size_t>(std::max<int64_t>(from, 0)); i < log.size() && out.size() < max; ++i) {
    out.push_back(log[i]);
  }
  return out;
}

int64_t FakeBroker::EndOffset(const std::string& topic, int32_t partition) const {
  std::lock_guard lock(mu_);
  auto it = topics_.find(topic);
  if (it == topics_.end() || partition < 0 || static_cast<size_t>(partition) >= it->second.size()) return 0;
  return static_cast<int64_t>(it->second[static_cast<size_t>(partition)].size());
}

std::vector<ConsumedRecord> FakeBroker::All(const std::string& topic) const {
  std::lock_guard lock(mu_);
  std::vector<ConsumedRecord> out;
  auto it = topics_.find(topic);
  if (it == topics_.end()) return out;
  for (const auto& log : it->second) out.insert(out.end(), log.begin(), log.end());
  return out;
}

void FakeBroker::WaitForAppend(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mu_);
  uint64_t seen = appends_;
  appended_.wait_for(lock, timeout, [&] { return appends_ != seen; });
}

void FakeBroker::Commit(const std::string& group, const std::string& topic, int32_t partition,
                        int64_t next_offset) {
  std::lock_guard lock(mu_);
  committed_[{group, topic, partition}] = next_offset;
}

int64_t FakeBroker::Committed(const std::string& group, const std::string& topic, int32_t partition) const {
  std::lock_guard lock(mu_);
  auto it = committed_.find({group, topic, partition});
  return it == committed_.end() ? -1 : it->second;
}

void FakeBroker::InjectConsumerFatal(const std::string& group, absl::Status status) {
  std::lock_guard lock(mu_);
  fatal_[group] = std::move(status);
}

absl::Status FakeBroker::ConsumerFatal(const std::string& group) const {
  std::lock_guard lock(mu_);
  auto it = fatal_.find(group);
  return it == fatal_.end() ? absl::OkStatus() : it->second;
}

}  // namespace relay::kafka::testing
