#include "relay/kafka/reader.h"

#include <librdkafka/rdkafka.h>

#include "rdkafka_util.h"
#include "relay/kafka/errors.h"

namespace relay::kafka {
namespace {

class KafkaTopicReader final : public TopicReader {
 public:
  explicit KafkaTopicReader(ReaderOptions options) : options_(std::move(options)) {}
  ~KafkaTopicReader() override { internal::CloseUngroupedConsumer(rk_); }

  absl::Status Start() {
    auto rk = internal::NewUngroupedConsumer(
        "kafka reader",
        {{"bootstrap.servers", options_.bootstrap},
         {"client.id", options_.client_id},
         // If retention removes the oldest records between the watermark
         // query and the fetch, go on from the new oldest one; librdkafka's
         // default (latest) would jump to the end and the read would look
         // complete with records missing.
         {"auto.offset.reset", "earliest"},
         {"fetch.message.max.bytes", std::to_string(32 * 1024 * 1024)},
         // A reader wants records that exist; librdkafka's defaults (a
         // fetch waits up to 500 ms at the broker, 500 ms of backoff after
         // an empty one) cost half a second per partition read or record
         // read back (measured: ReadAt 510 ms, 5 ms with these).
         {"fetch.wait.max.ms", "10"},
         {"fetch.error.backoff.ms", "10"}},
        options_.extra);
    if (!rk.ok()) return rk.status();
    rk_ = *rk;
    return absl::OkStatus();
  }

  absl::StatusOr<int> Partitions(const std::string& topic) override {
    rd_kafka_topic_t* rkt = rd_kafka_topic_new(rk_, topic.c_str(), nullptr);
    const rd_kafka_metadata_t* md = nullptr;
    rd_kafka_resp_err_t e = rd_kafka_metadata(rk_, 0, rkt, &md, static_cast<int>(options_.timeout.count()));
    rd_kafka_topic_destroy(rkt);
    if (e) return ToStatus(e, ("metadata of " + topic).c_str());
    absl::StatusOr<int> result;
    if (md->topic_cnt != 1) {
      result = absl::UnavailableError("metadata of " + topic + ": no answer for the topic");
    } else if (md->topics[0].err) {
      result = ToStatus(md->topics[0].err, ("topic " + topic).c_str());
    } else {
      result = md->topics[0].partition_cnt;
    }
    rd_kafka_metadata_destroy(md);
    return result;
  }

  absl::StatusOr<std::map<int32_t, int64_t>> ReadToEnd(const std::string& topic, const std::vector<int32_t>& wanted,
                                                       ReadCallback callback) override {
    auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    std::vector<int32_t> partitions = wanted;
    if (partitions.empty()) {
      auto n = Partitions(topic);
      if (!n.ok()) return n.status();
      for (int32_t p = 0; p < *n; ++p) partitions.push_back(p);
    }
    std::map<int32_t, int64_t> end;        // every partition read: offset after its last record
    std::map<int32_t, int64_t> remaining;  // partitions not yet read to their end
    rd_kafka_topic_partition_list_t* assign = rd_kafka_topic_partition_list_new(static_cast<int>(partitions.size()));
    for (int32_t p : partitions) {
      int64_t lo = 0, hi = 0;
      rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(rk_, topic.c_str(), p, &lo, &hi,
                                                               static_cast<int>(options_.timeout.count()));
      if (e) {
        rd_kafka_topic_partition_list_destroy(assign);
        return ToStatus(e, ("watermarks of " + topic + "/" + std::to_string(p)).c_str());
      }
      end[p] = hi;
      if (hi > lo) {
        remaining[p] = hi;
        rd_kafka_topic_partition_list_add(assign, topic.c_str(), p)->offset = lo;
      }
    }
    rd_kafka_assign(rk_, assign);
    rd_kafka_topic_partition_list_destroy(assign);
    absl::Status status = absl::OkStatus();
    while (!remaining.empty() && status.ok()) {
      if (std::chrono::steady_clock::now() > deadline) {
        status = absl::DeadlineExceededError("read of " + topic + " did not reach the end of " +
                                             std::to_string(remaining.size()) + " partitions within " +
                                             std::to_string(options_.timeout.count()) + " ms");
        break;
      }
      rd_kafka_message_t* m = rd_kafka_consumer_poll(rk_, 100);
      if (!m) {
        // The last offsets may be no records at all (transaction markers,
        // compaction): the position tells when a partition is done.
        DropFinished(topic, &remaining);
        continue;
      }
      if (m->err) {
        if (Classify(m->err) == ErrorClass::kPermanent) status = ToStatus(m->err, ("read " + topic).c_str());
        rd_kafka_message_destroy(m);
        continue;
      }
      ConsumedRecord record = internal::ToRecord(m);
      rd_kafka_message_destroy(m);
      auto it = remaining.find(record.partition);
      if (it == remaining.end() || record.offset >= it->second) continue;  // past the end seen at the start
      status = callback(record);
      if (record.offset + 1 >= it->second) remaining.erase(it);
    }
    rd_kafka_assign(rk_, nullptr);
    if (!status.ok()) return status;
    return end;
  }

  absl::StatusOr<ConsumedRecord> ReadAt(const std::string& topic, int32_t partition, int64_t offset) override {
    auto deadline = std::chrono::steady_clock::now() + options_.timeout;
    int64_t lo = 0, hi = 0;
    rd_kafka_resp_err_t e = rd_kafka_query_watermark_offsets(rk_, topic.c_str(), partition, &lo, &hi,
                                                             static_cast<int>(options_.timeout.count()));
    if (e) return ToStatus(e, ("watermarks of " + topic + "/" + std::to_string(partition)).c_str());
    if (offset < lo || offset >= hi) {
      return absl::NotFoundError(topic + "/" + std::to_string(partition) + " has no record at offset " +
                                 std::to_string(offset));
    }
    rd_kafka_topic_partition_list_t* assign = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(assign, topic.c_str(), partition)->offset = offset;
    rd_kafka_assign(rk_, assign);
    rd_kafka_topic_partition_list_destroy(assign);
    absl::StatusOr<ConsumedRecord> out = absl::DeadlineExceededError(
        "read of " + topic + "/" + std::to_string(partition) + "@" + std::to_string(offset) + " timed out");
    while (std::chrono::steady_clock::now() < deadline) {
      rd_kafka_message_t* m = rd_kafka_consumer_poll(rk_, 100);
      if (!m) continue;
      if (m->err) {
        bool permanent = Classify(m->err) == ErrorClass::kPermanent;
        if (permanent) out = ToStatus(m->err, ("read " + topic).c_str());
        rd_kafka_message_destroy(m);
        if (permanent) break;
        continue;
      }
      ConsumedRecord record = internal::ToRecord(m);
      rd_kafka_message_destroy(m);
      // Compaction removed it: the first record after it comes instead.
      if (record.offset != offset) {
        out = absl::NotFoundError(topic + "/" + std::to_string(partition) + "@" + std::to_string(offset) +
                                  " was compacted away");
      } else {
        out = std::move(record);
      }
      break;
    }
    rd_kafka_assign(rk_, nullptr);
    return out;
  }

 private:
  void DropFinished(const std::string& topic, std::map<int32_t, int64_t>* remaining) {
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(static_cast<int>(remaining->size()));
    for (const auto& [p, hi] : *remaining) rd_kafka_topic_partition_list_add(list, topic.c_str(), p);
    if (rd_kafka_position(rk_, list) == RD_KAFKA_RESP_ERR_NO_ERROR) {
      for (int i = 0; i < list->cnt; ++i) {
        auto it = remaining->find(list->elems[i].partition);
        if (list->elems[i].offset >= 0 && it != remaining->end() && list->elems[i].offset >= it->second) {
          remaining->erase(it);
        }
      }
    }
    rd_kafka_topic_partition_list_destroy(list);
  }

  ReaderOptions options_;
  rd_kafka_t* rk_ = nullptr;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TopicReader>> NewKafkaTopicReader(ReaderOptions options) {
  if (options.bootstrap.empty()) return absl::InvalidArgumentError("kafka reader: bootstrap is empty");
  auto reader = std::make_unique<KafkaTopicReader>(std::move(options));
  if (auto s = reader->Start(); !s.ok()) return s;
  return std::unique_ptr<TopicReader>(std::move(reader));
}

}  // namespace relay::kafka
