#include "relay/kafka/follower.h"

#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>

#include "rdkafka_util.h"
#include "relay/base/log.h"
#include "relay/kafka/errors.h"

namespace relay::kafka {
namespace {

constexpr auto kMetadataInterval = std::chrono::seconds(30);
constexpr auto kRetryInterval = std::chrono::seconds(1);

class KafkaFollower final : public Follower {
 public:
  KafkaFollower(FollowerOptions options, FollowCallback callback)
      : options_(std::move(options)), callback_(std::move(callback)) {}

  ~KafkaFollower() override {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    internal::CloseUngroupedConsumer(rk_);
  }

  absl::Status Start() {
    auto rk = internal::NewUngroupedConsumer(
        "kafka follower",
        {{"bootstrap.servers", options_.bootstrap},
         {"client.id", options_.client_id},
         {"auto.offset.reset", options_.from_beginning ? "earliest" : "latest"},
         {"fetch.wait.max.ms", std::to_string(options_.max_fetch_wait.count())}},
        options_.extra);
    if (!rk.ok()) return rk.status();
    rk_ = *rk;
    thread_ = std::thread([this] { Loop(); });
    return absl::OkStatus();
  }

  bool CaughtUp() const override { return caught_up_.load(); }

  absl::Status Health() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return health_;
  }

 private:
  void SetHealth(absl::Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    health_ = std::move(s);
  }

  // Assigns partitions not yet followed. The first ones start at the
  // beginning or the end as configured; later ones (the topic grew) at
  // their beginning, so nothing written to them is missed.
  void AssignNew() {
    rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk_, options_.topic.c_str(), nullptr);
    const rd_kafka_metadata_t* md = nullptr;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk_, 0, rkt, &md, 5000);
    rd_kafka_topic_destroy(rkt);
    if (e) {
      SetHealth(ToStatus(e, ("metadata of " + options_.topic).c_str()));
      return;
    }
    int count = 0;
    if (md->topic_cnt == 1 && !md->topics[0].err) count = md->topics[0].partition_cnt;
    absl::Status topic_error = md->topic_cnt != 1 ? absl::UnavailableError("no metadata for " + options_.topic)
                               : md->topics[0].err ? ToStatus(md->topics[0].err, ("topic " + options_.topic).c_str())
                                                   : absl::OkStatus();
    rd_kafka_metadata_destroy(md);
    if (!topic_error.ok() || count == 0) {
      SetHealth(topic_error.ok() ? absl::UnavailableError("topic " + options_.topic + " has no partitions") : topic_error);
      return;
    }
    if (count <= assigned_) {
      SetHealth(absl::OkStatus());
      return;
    }
    bool first = assigned_ == 0;
    std::map<int32_t, int64_t> by_time;
    if (first && options_.from_unix_ms > 0) {
      auto offsets = OffsetsForTime(count);
      if (!offsets.ok()) {
        SetHealth(offsets.status());
        return;
      }
      by_time = std::move(*offsets);
    }
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(count - assigned_);
    for (int32_t p = assigned_; p < count; ++p) {
      int64_t lo = 0, hi = 0;
      e = rd_kafka_query_watermark_offsets(rk_, options_.topic.c_str(), p, &lo, &hi, 5000);
      if (e) {
        rd_kafka_topic_partition_list_destroy(list);
        SetHealth(ToStatus(e, ("watermarks of " + options_.topic).c_str()));
        return;
      }
      bool from_start = !first || options_.from_beginning;
      int64_t start = from_start ? lo : hi;
      // No record at or after the time: the end (-1 from the broker).
      if (auto it = by_time.find(p); it != by_time.end()) start = it->second < 0 ? hi : std::max(lo, it->second);
      rd_kafka_topic_partition_list_add(list, options_.topic.c_str(), p)->offset = start;
      if (start < hi) targets_[p] = hi;
    }
    rd_kafka_error_t* error = rd_kafka_incremental_assign(rk_, list);
    rd_kafka_topic_partition_list_destroy(list);
    if (error) {
      SetHealth(absl::UnavailableError(std::string("assign ") + options_.topic + ": " + rd_kafka_error_string(error)));
      rd_kafka_error_destroy(error);
      return;
    }
    assigned_ = count;
    SetHealth(absl::OkStatus());
  }

  // Partitions 0..count-1 -> the first offset at or after from_unix_ms
  // (-1: none).
  absl::StatusOr<std::map<int32_t, int64_t>> OffsetsForTime(int32_t count) {
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(count);
    for (int32_t p = 0; p < count; ++p) {
      rd_kafka_topic_partition_list_add(list, options_.topic.c_str(), p)->offset = options_.from_unix_ms;
    }
    rd_kafka_resp_err_t e = rd_kafka_offsets_for_times(rk_, list, 5000);
    std::map<int32_t, int64_t> out;
    for (int i = 0; !e && i < list->cnt; ++i) {
      if (list->elems[i].err) e = list->elems[i].err;
      out[list->elems[i].partition] = list->elems[i].offset;
    }
    rd_kafka_topic_partition_list_destroy(list);
    if (e) return ToStatus(e, ("offsets by time of " + options_.topic).c_str());
    return out;
  }

  // Drops targets reached by position (the last offsets may hold no
  // records: compaction, transaction markers).
  void CheckTargets() {
    if (targets_.empty()) return;
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(static_cast<int>(targets_.size()));
    for (const auto& [p, hi] : targets_) rd_kafka_topic_partition_list_add(list, options_.topic.c_str(), p);
    if (rd_kafka_position(rk_, list) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      for (int i = 0; i < list->cnt; ++i) {
        auto it = targets_.find(list->elems[i].partition);
        if (it != targets_.end() && list->elems[i].offset >= it->second) targets_.erase(it);
      }
    }
    rd_kafka_topic_partition_list_destroy(list);
  }

  void Loop() {
    auto next_metadata = std::chrono::steady_clock::now();
    while (!stop_) {
      auto now = std::chrono::steady_clock::now();
      if (now >= next_metadata) {
        AssignNew();
        next_metadata = now + (assigned_ == 0 ? std::chrono::steady_clock::duration(kRetryInterval)
                                              : std::chrono::steady_clock::duration(kMetadataInterval));
      }
      if (assigned_ == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      rd_kafka_message_t* m = rd_kafka_consumer_poll(rk_, 100);
      if (!m) {
        CheckTargets();
        if (targets_.empty()) caught_up_ = true;
        continue;
      }
      if (m->err) {
        if (Classify(m->err) == ErrorClass::kPermanent) {
          SetHealth(ToStatus(m->err, ("follow " + options_.topic).c_str()));
        }
        rd_kafka_message_destroy(m);
        continue;
      }
      ConsumedRecord record = internal::ToRecord(m);
      rd_kafka_message_destroy(m);
      callback_(record);
      auto it = targets_.find(record.partition);
      if (it != targets_.end() && record.offset + 1 >= it->second) targets_.erase(it);
      if (targets_.empty()) caught_up_ = true;
    }
  }

  FollowerOptions options_;
  FollowCallback callback_;
  rd_kafka_t* rk_ = nullptr;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> caught_up_{false};
  int32_t assigned_ = 0;                // partitions 0..assigned_-1 are followed (follower thread only)
  std::map<int32_t, int64_t> targets_;  // partition -> end offset to reach before CaughtUp (follower thread only)
  mutable std::mutex mu_;
  absl::Status health_ = absl::UnavailableError("not yet following");
};

}  // namespace

absl::StatusOr<std::unique_ptr<Follower>> NewKafkaFollower(FollowerOptions options, FollowCallback callback) {
  if (options.bootstrap.empty()) return absl::InvalidArgumentError("kafka follower: bootstrap is empty");
  if (options.topic.empty()) return absl::InvalidArgumentError("kafka follower: topic is empty");
  auto follower = std::make_unique<KafkaFollower>(std::move(options), std::move(callback));
  if (auto s = follower->Start(); !s.ok()) return s;
  return std::unique_ptr<Follower>(std::move(follower));
}

}  // namespace relay::kafka
