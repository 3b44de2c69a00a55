#include <librdkafka/rdkafka.h>

#include <algorithm>
#include <atomic>
#include <future>
#include <thread>

#include "prometheus/counter.h"
#include "relay/base/log.h"
#include "relay/kafka/consumer.h"
#include "relay/kafka/errors.h"

namespace relay::kafka {

bool IsPoison(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kDataLoss:
      return true;
    default:
      return false;
  }
}

namespace {

ConsumedRecord ToRecord(const rd_kafka_message_t* m) {
  ConsumedRecord r;
  r.topic = rd_kafka_topic_name(m->rkt);
  r.partition = m->partition;
  r.offset = m->offset;
  rd_kafka_timestamp_type_t tstype;
  r.timestamp_ms = rd_kafka_message_timestamp(m, &tstype);
  if (m->key) r.key.assign(static_cast<const char*>(m->key), m->key_len);
  if (m->payload) r.value.assign(static_cast<const char*>(m->payload), m->len);
  rd_kafka_headers_t* hdrs = nullptr;
  if (rd_kafka_message_headers(m, &hdrs) == RD_KAFKA_RESP_ERR_NO_ERROR) {
    const char* name;
    const void* value;
    size_t size;
    for (size_t i = 0; rd_kafka_header_get_all(hdrs, i, &name, &value, &size) == RD_KAFKA_RESP_ERR_NO_ERROR; ++i) {
      r.headers.push_back({name, value ? std::string(static_cast<const char*>(value), size) : ""});
    }
  }
  return r;
}

class KafkaConsumer final : public Consumer {
 public:
  KafkaConsumer(ConsumerOptions options, Producer* dead_letters, prometheus::Registry* metrics)
      : options_(std::move(options)),
        dead_letters_(dead_letters),
        own_registry_(metrics ? nullptr : std::make_shared<prometheus::Registry>()),
        registry_(metrics ? metrics : own_registry_.get()),
        outcomes_(prometheus::BuildCounter()
                      .Name("relay_kafka_consumed_records_total")
                      .Help("Records handled by consumers, by outcome")
                      .Register(*registry_)),
        done_(outcomes_.Add({{"outcome", "done"}})),
        dead_lettered_(outcomes_.Add({{"outcome", "dead_lettered"}})),
        retried_(outcomes_.Add({{"outcome", "retried"}})) {}

  ~KafkaConsumer() override {
    if (rk_) rd_kafka_destroy(rk_);
  }

  absl::Status Start() {
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    std::vector<std::pair<std::string, std::string>> props = {
        {"bootstrap.servers", options_.bootstrap},
        {"group.id", options_.group_id},
        {"client.id", options_.client_id},
        // At-least-once: auto-commit only ever commits offsets we stored,
        // and we store an offset only after the handler's effect is done.
        {"enable.auto.commit", "true"},
        {"enable.auto.offset.store", "false"},
        {"auto.commit.interval.ms", std::to_string(options_.commit_interval.count())},
        {"auto.offset.reset", options_.auto_offset_reset},
        {"enable.partition.eof", "false"},
    };
    for (const auto& kv : options_.extra) props.emplace_back(kv);
    for (const auto& [k, v] : props) {
      if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
        rd_kafka_conf_destroy(conf);
        return absl::InvalidArgumentError("kafka consumer property " + k + ": " + err);
      }
    }
    rd_kafka_conf_set_opaque(conf, this);
    RouteLogs(conf);
    rd_kafka_conf_set_rebalance_cb(conf, &KafkaConsumer::OnRebalance);
    rk_ = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!rk_) {
      rd_kafka_conf_destroy(conf);
      return absl::InvalidArgumentError(std::string("kafka consumer: ") + err);
    }
    rd_kafka_poll_set_consumer(rk_);
    rd_kafka_topic_partition_list_t* topics = rd_kafka_topic_partition_list_new(options_.topics.size());
    for (const auto& t : options_.topics) rd_kafka_topic_partition_list_add(topics, t.c_str(), RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(rk_, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    return ToStatus(e, "subscribe");
  }

  absl::Status Run(RecordHandler handler) override {
    auto backoff = options_.retry_backoff_min;
    while (!stop_) {
      rd_kafka_message_t* m = rd_kafka_consumer_poll(rk_, 100);
      if (!m) continue;
      if (m->err) {
        if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
          log::Warn("kafka consumer error", {{"error", rd_kafka_err2name(m->err)},
                                             {"reason", rd_kafka_message_errstr(m)}});
        }
        rd_kafka_message_destroy(m);
        continue;
      }
      ConsumedRecord record = ToRecord(m);
      rd_kafka_message_destroy(m);
      absl::Status status = handler(record);
      if (!status.ok() && IsPoison(status)) status = DeadLetter(record, status);
      if (status.ok()) {
        StoreOffset(record);
        backoff = options_.retry_backoff_min;
        continue;
      }
      // Transient: rewind this partition to the record so the next poll hands
      // it over again (a seek discards what was prefetched after it), and
      // back off without giving up the group membership.
      retried_.Increment();
      log::Warn("record handling failed; will retry",
                {{"topic", record.topic}, {"partition", record.partition},
                 {"offset", record.offset}, {"error", std::string(status.message())},
                 {"backoff_ms", backoff.count()}});
      // If the partition cannot be rewound, a later record of it could be
      // handled and its offset stored past this one, skipping it: stop
      // instead (nothing of this record was stored; a restart redoes it).
      bool rewound = false;
      for (int attempt = 0; attempt < 5 && !rewound && !stop_; ++attempt) {
        rewound = Rewind(record);
        if (!rewound) SleepUnlessStopped(std::chrono::seconds(1));
      }
      if (!rewound) {
        (void)rd_kafka_consumer_close(rk_);
        return absl::InternalError("cannot rewind " + record.topic + "/" + std::to_string(record.partition) +
                                   " to offset " + std::to_string(record.offset) + " after a failed record");
      }
      SleepUnlessStopped(backoff);
      backoff = std::min(backoff * 2, options_.retry_backoff_max);
    }
    rd_kafka_resp_err_t err = rd_kafka_consumer_close(rk_);  // commits stored offsets, leaves the group
    return ToStatus(err, "consumer close");
  }

  void Stop() override { stop_ = true; }

 private:
  absl::Status DeadLetter(const ConsumedRecord& record, const absl::Status& reason) {
    Record dlq{record.topic + options_.dead_letter_suffix, record.key, record.value, record.headers};
    dlq.headers.push_back({kDlqReasonHeader, std::string(reason.message())});
    dlq.headers.push_back({kDlqTopicHeader, record.topic});
    dlq.headers.push_back({kDlqPartitionHeader, std::to_string(record.partition)});
    dlq.headers.push_back({kDlqOffsetHeader, std::to_string(record.offset)});
    std::promise<absl::Status> acked;
    auto future = acked.get_future();
    dead_letters_->Send(std::move(dlq), [&acked](absl::Status s) mutable { acked.set_value(std::move(s)); });
    absl::Status status = future.get();
    if (status.ok()) {
      dead_lettered_.Increment();
      log::Warn("record dead-lettered", {{"topic", record.topic}, {"partition", record.partition},
                                         {"offset", record.offset}, {"reason", std::string(reason.message())}});
    }
    return status;
  }

  void StoreOffset(const ConsumedRecord& record) {
    done_.Increment();
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, record.topic.c_str(), record.partition)->offset = record.offset + 1;
    rd_kafka_resp_err_t err = rd_kafka_offsets_store(rk_, list);
    rd_kafka_topic_partition_list_destroy(list);
    // _STATE: the partition was revoked meanwhile; its new owner reprocesses
    // the record (at-least-once), so this is not an error.
    if (err && err != RD_KAFKA_RESP_ERR__STATE) {
      log::Warn("offset store failed", {{"error", rd_kafka_err2name(err)}});
    }
  }

  // Seeks the record's partition back to it. True when the seek took; the
  // partition-level error is in the list, not only in the return value.
  bool Rewind(const ConsumedRecord& record) {
    rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(list, record.topic.c_str(), record.partition)->offset = record.offset;
    rd_kafka_error_t* error = rd_kafka_seek_partitions(rk_, list, 5000);
    bool ok = !error && list->elems[0].err == RD_KAFKA_RESP_ERR_NO_ERROR;
    if (!ok) {
      log::Warn("seek failed", {{"topic", record.topic}, {"partition", record.partition},
                                {"error", error ? rd_kafka_error_string(error) : rd_kafka_err2str(list->elems[0].err)}});
    }
    if (error) rd_kafka_error_destroy(error);
    rd_kafka_topic_partition_list_destroy(list);
    return ok;
  }

  void SleepUnlessStopped(std::chrono::milliseconds d) {
    auto until = std::chrono::steady_clock::now() + d;
    while (!stop_ && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  static void OnRebalance(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                          rd_kafka_topic_partition_list_t* partitions, void*) {
    bool cooperative = std::string_view(rd_kafka_rebalance_protocol(rk)) == "COOPERATIVE";
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
      log::Info("partitions assigned", {{"count", partitions->cnt}});
      if (cooperative) {
        if (auto* e = rd_kafka_incremental_assign(rk, partitions)) rd_kafka_error_destroy(e);
      } else {
        rd_kafka_assign(rk, partitions);
      }
      return;
    }
    // Revoked: commit what we finished before someone else owns it, so the
    // new owner does not redo it. librdkafka's auto-commit also commits
    // stored offsets on revoke; this synchronous commit makes the guarantee
    // ours and visible (a failure is logged) rather than a side effect of a
    // setting. consumer_it_test's rebalance test checks the behaviour.
    log::Info("partitions revoked", {{"count", partitions->cnt}});
    rd_kafka_resp_err_t cerr = rd_kafka_commit(rk, nullptr, 0);
    if (cerr && cerr != RD_KAFKA_RESP_ERR__NO_OFFSET) {
      log::Warn("commit on revoke failed", {{"error", rd_kafka_err2name(cerr)}});
    }
    if (cooperative) {
      if (auto* e = rd_kafka_incremental_unassign(rk, partitions)) rd_kafka_error_destroy(e);
    } else {
      rd_kafka_assign(rk, nullptr);
    }
  }

  ConsumerOptions options_;
  Producer* dead_letters_;
  std::shared_ptr<prometheus::Registry> own_registry_;
  prometheus::Registry* registry_;
  prometheus::Family<prometheus::Counter>& outcomes_;
  prometheus::Counter& done_;
  prometheus::Counter& dead_lettered_;
  prometheus::Counter& retried_;
  rd_kafka_t* rk_ = nullptr;
  std::atomic<bool> stop_{false};
};

}  // namespace

absl::StatusOr<std::unique_ptr<Consumer>> NewKafkaConsumer(ConsumerOptions options, Producer* dead_letters,
                                                          prometheus::Registry* metrics) {
  if (options.group_id.empty()) return absl::InvalidArgumentError("kafka consumer: group_id is empty");
  if (options.topics.empty()) return absl::InvalidArgumentError("kafka consumer: no topics");
  if (!dead_letters) return absl::InvalidArgumentError("kafka consumer: a dead-letter producer is required");
  auto consumer = std::make_unique<KafkaConsumer>(std::move(options), dead_letters, metrics);
  if (auto s = consumer->Start(); !s.ok()) return s;
  return std::unique_ptr<Consumer>(std::move(consumer));
}

}  // namespace relay::kafka
