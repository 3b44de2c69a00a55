// The librdkafka side of the consumer: a Source for LoopConsumer
// (consumer_loop.h), which holds the logic.
#include <librdkafka/rdkafka.h>

#include <atomic>
#include <map>
#include <mutex>

#include "consumer_lag.h"
#include "consumer_loop.h"
#include "rdkafka_util.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "relay/base/log.h"
#include "relay/kafka/consumer.h"
#include "relay/kafka/errors.h"
#include "relay/kafka/security.h"

namespace relay::kafka {
namespace {


// A one-partition list for the calls that take lists.
class OnePartition {
 public:
  OnePartition(const TopicPartition& tp, int64_t offset = RD_KAFKA_OFFSET_INVALID)
      : list_(rd_kafka_topic_partition_list_new(1)) {
    rd_kafka_topic_partition_list_add(list_, tp.topic.c_str(), tp.partition)->offset = offset;
  }
  ~OnePartition() { rd_kafka_topic_partition_list_destroy(list_); }
  OnePartition(const OnePartition&) = delete;
  OnePartition& operator=(const OnePartition&) = delete;
  rd_kafka_topic_partition_list_t* get() { return list_; }
  rd_kafka_resp_err_t err() const { return list_->elems[0].err; }

 private:
  rd_kafka_topic_partition_list_t* list_;
};

class KafkaSource final : public internal::Source {
 public:
  KafkaSource(ConsumerOptions options, prometheus::Registry* registry)
      : options_(std::move(options)),
        errors_(prometheus::BuildCounter()
                    .Name("relay_kafka_consumer_errors_total")
                    .Help("Errors reported by the Kafka consumer client, by librdkafka error name")
                    .Register(*registry)),
        lag_(prometheus::BuildGauge()
                 .Name("relay_kafka_consumer_lag")
                 .Help("Records not yet done on each partition this instance owns: the partition's end "
                       "minus the offset stored after the effect (committed offset until the first store); "
                       "from librdkafka statistics, every statistics.interval.ms (15 s)")
                 .Register(*registry)) {}

  ~KafkaSource() override {
    (void)Close();
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
        {"queued.max.messages.kbytes", std::to_string(options_.fetch_queue_kbytes)},
        // Records up to intake's 25 MB webhooks plus envelope.
        {"fetch.message.max.bytes", std::to_string(32 * 1024 * 1024)},
        // For relay_kafka_consumer_lag (OnStats); an extra property may change it.
        {"statistics.interval.ms", "15000"},
    };
    for (auto& kv : SecurityProperties()) props.emplace_back(std::move(kv));
    for (const auto& kv : options_.extra) props.emplace_back(kv);
    for (const auto& [k, v] : props) {
      if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
        rd_kafka_conf_destroy(conf);
        return absl::InvalidArgumentError("kafka consumer property " + k + ": " + err);
      }
    }
    rd_kafka_conf_set_opaque(conf, this);
    RouteLogs(conf);
    rd_kafka_conf_set_rebalance_cb(conf, &KafkaSource::OnRebalance);
    rd_kafka_conf_set_error_cb(conf, &KafkaSource::OnError);
    rd_kafka_conf_set_stats_cb(conf, &KafkaSource::OnStats);
    rk_ = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!rk_) {
      rd_kafka_conf_destroy(conf);
      return absl::InvalidArgumentError(std::string("kafka consumer: ") + err);
    }
    rd_kafka_poll_set_consumer(rk_);
    rd_kafka_topic_partition_list_t* topics = rd_kafka_topic_partition_list_new(static_cast<int>(options_.topics.size()));
    for (const auto& t : options_.topics) rd_kafka_topic_partition_list_add(topics, t.c_str(), RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(rk_, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    return ToStatus(e, "subscribe");
  }

  std::optional<ConsumedRecord> Poll(std::chrono::milliseconds timeout) override {
    rd_kafka_message_t* m = rd_kafka_consumer_poll(rk_, static_cast<int>(timeout.count()));
    if (!m) return std::nullopt;
    if (m->err) {
      CountError(m->err, rd_kafka_message_errstr(m));
      rd_kafka_message_destroy(m);
      return std::nullopt;
    }
    ConsumedRecord record = internal::ToRecord(m);
    rd_kafka_message_destroy(m);
    {
      std::lock_guard lock(mu_);
      degraded_ = absl::OkStatus();  // records flow again
    }
    return record;
  }

  absl::Status Fatal() override {
    char reason[512] = "";
    rd_kafka_resp_err_t err = rd_kafka_fatal_error(rk_, reason, sizeof reason);
    if (err == RD_KAFKA_RESP_ERR_NO_ERROR) return absl::OkStatus();
    return absl::AbortedError(std::string("kafka consumer fatal error: ") + rd_kafka_err2name(err) + ": " + reason);
  }

  absl::Status Degraded() override {
    std::lock_guard lock(mu_);
    return degraded_;
  }

  void Store(const TopicPartition& tp, int64_t next_offset) override {
    OnePartition list(tp, next_offset);
    rd_kafka_resp_err_t err = rd_kafka_offsets_store(rk_, list.get());
    // _STATE: the partition was revoked meanwhile; its new owner reprocesses
    // the record (at-least-once), so this is not an error.
    if (err && err != RD_KAFKA_RESP_ERR__STATE) {
      log::Warn("offset store failed", {{"topic", tp.topic}, {"error", rd_kafka_err2name(err)}});
    }
  }

  absl::Status Rewind(const TopicPartition& tp, int64_t offset) override {
    OnePartition list(tp, offset);
    rd_kafka_error_t* error = rd_kafka_seek_partitions(rk_, list.get(), 5000);
    // The partition-level error is in the list, not only in the return value.
    absl::Status status = absl::OkStatus();
    if (error) {
      status = absl::UnavailableError(std::string("seek: ") + rd_kafka_error_string(error));
      rd_kafka_error_destroy(error);
    } else if (list.err() != RD_KAFKA_RESP_ERR_NO_ERROR) {
      status = ToStatus(list.err(), "seek");
    }
    if (!status.ok()) {
      log::Warn("seek failed", {{"topic", tp.topic}, {"partition", tp.partition},
                                {"error", std::string(status.message())}});
    }
    return status;
  }

  void Pause(const TopicPartition& tp) override {
    OnePartition list(tp);
    rd_kafka_pause_partitions(rk_, list.get());
  }

  void Resume(const TopicPartition& tp) override {
    OnePartition list(tp);
    rd_kafka_resume_partitions(rk_, list.get());
  }

  absl::Status Close() override {
    if (closed_ || !rk_) return absl::OkStatus();
    closed_ = true;
    // Commits stored offsets and leaves the group.
    return ToStatus(rd_kafka_consumer_close(rk_), "consumer close");
  }

  std::shared_ptr<const GroupMember> Member() const override {
    // librdkafka answers from its group thread (a request it waits for):
    // safe from any thread while the handle lives, which it does until
    // this source is destroyed; after Close there is no membership.
    if (closed_ || !rk_) return nullptr;
    rd_kafka_consumer_group_metadata_t* m = rd_kafka_consumer_group_metadata(rk_);
    return m ? std::make_shared<const GroupMember>(m) : nullptr;
  }

 private:
  void CountError(rd_kafka_resp_err_t err, const char* reason) {
    errors_.Add({{"error", rd_kafka_err2name(err)}}).Increment();
    log::Warn("kafka consumer error", {{"error", rd_kafka_err2name(err)}, {"reason", reason}});
    if (Classify(err) == ErrorClass::kPermanent) {
      std::lock_guard lock(mu_);
      degraded_ = ToStatus(err, "consume");
    }
  }

  static void OnError(rd_kafka_t*, int err, const char* reason, void* opaque) {
    // Fatal errors are also seen by Fatal(); the rest are counted and logged.
    static_cast<KafkaSource*>(opaque)->CountError(static_cast<rd_kafka_resp_err_t>(err), reason);
  }

  // Served by rd_kafka_consumer_poll, on the polling thread. Partitions no
  // longer owned lose their series, so a sum over instances counts each once.
  static int OnStats(rd_kafka_t*, char* json, size_t len, void* opaque) {
    auto* self = static_cast<KafkaSource*>(opaque);
    std::map<TopicPartition, prometheus::Gauge*> seen;
    for (const auto& p : internal::ParseConsumerLag(self->stats_parser_, std::string_view(json, len))) {
      TopicPartition tp{p.topic, p.partition};
      auto it = self->lag_gauges_.find(tp);
      prometheus::Gauge* g = it != self->lag_gauges_.end()
                                 ? it->second
                                 : &self->lag_.Add({{"group", self->options_.group_id},
                                                    {"topic", p.topic},
                                                    {"partition", std::to_string(p.partition)}});
      g->Set(static_cast<double>(p.lag));
      seen.emplace(std::move(tp), g);
    }
    for (const auto& [tp, g] : self->lag_gauges_) {
      if (!seen.count(tp)) self->lag_.Remove(g);
    }
    self->lag_gauges_ = std::move(seen);
    return 0;  // librdkafka frees json
  }

  static void OnRebalance(rd_kafka_t* rk, rd_kafka_resp_err_t err,
                          rd_kafka_topic_partition_list_t* partitions, void* opaque) {
    auto* self = static_cast<KafkaSource*>(opaque);
    bool cooperative = std::string_view(rd_kafka_rebalance_protocol(rk)) == "COOPERATIVE";
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
      log::Info("partitions assigned", {{"count", partitions->cnt}});
      if (cooperative) {
        if (auto* e = rd_kafka_incremental_assign(rk, partitions)) rd_kafka_error_destroy(e);
      } else {
        rd_kafka_assign(rk, partitions);
      }
      // A partition paused for a backoff when it was taken away comes back
      // unpaused: its backoff went with it.
      rd_kafka_resume_partitions(rk, partitions);
      if (self->on_assign_) {
        std::vector<TopicPartition> assigned;
        for (int i = 0; i < partitions->cnt; ++i) {
          assigned.push_back({partitions->elems[i].topic, partitions->elems[i].partition});
        }
        self->on_assign_(assigned);
      }
      return;
    }
    // Revoked: commit what we finished before someone else owns it, so the
    // new owner does not redo it. librdkafka's auto-commit also commits
    // stored offsets on revoke; this synchronous commit makes the guarantee
    // ours and visible (a failure is logged) rather than a side effect of a
    // setting. consumer_it_test's rebalance test checks the behaviour.
    log::Info("partitions revoked", {{"count", partitions->cnt}});
    std::vector<TopicPartition> revoked;
    for (int i = 0; i < partitions->cnt; ++i) {
      revoked.push_back({partitions->elems[i].topic, partitions->elems[i].partition});
    }
    if (self->on_revoke_) self->on_revoke_(revoked);
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
  prometheus::Family<prometheus::Counter>& errors_;
  prometheus::Family<prometheus::Gauge>& lag_;
  std::map<TopicPartition, prometheus::Gauge*> lag_gauges_;  // polling thread only
  simdjson::dom::parser stats_parser_;                       // polling thread only
  rd_kafka_t* rk_ = nullptr;
  std::atomic<bool> closed_{false};
  std::mutex mu_;
  absl::Status degraded_;
};

}  // namespace

namespace internal {

absl::StatusOr<rd_kafka_t*> NewUngroupedConsumer(const std::string& what,
                                                 std::vector<std::pair<std::string, std::string>> props,
                                                 const std::map<std::string, std::string>& extra) {
  // Required by the consumer API; never joined (partitions are assigned by
  // hand) and nothing is committed.
  props.insert(props.begin(), {{"group.id", "relay-ungrouped"},
                               {"enable.auto.commit", "false"},
                               {"enable.auto.offset.store", "false"},
                               {"enable.partition.eof", "false"}});
  for (auto& kv : SecurityProperties()) props.emplace_back(std::move(kv));
  for (const auto& kv : extra) props.emplace_back(kv);
  char err[512];
  rd_kafka_conf_t* conf = rd_kafka_conf_new();
  for (const auto& [k, v] : props) {
    if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
      rd_kafka_conf_destroy(conf);
      return absl::InvalidArgumentError(what + " property " + k + ": " + err);
    }
  }
  RouteLogs(conf);
  rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
  if (!rk) {
    rd_kafka_conf_destroy(conf);
    return absl::InvalidArgumentError(what + ": " + err);
  }
  rd_kafka_poll_set_consumer(rk);
  return rk;
}

void CloseUngroupedConsumer(rd_kafka_t* rk) {
  if (!rk) return;
  rd_kafka_consumer_close(rk);
  rd_kafka_destroy(rk);
}

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

}  // namespace internal

absl::StatusOr<std::unique_ptr<Consumer>> NewKafkaConsumer(ConsumerOptions options, Producer* dead_letters,
                                                          prometheus::Registry* metrics) {
  if (options.group_id.empty()) return absl::InvalidArgumentError("kafka consumer: group_id is empty");
  if (options.topics.empty()) return absl::InvalidArgumentError("kafka consumer: no topics");
  if (!dead_letters) return absl::InvalidArgumentError("kafka consumer: a dead-letter producer is required");
  for (const char* key : kProtectedConsumerProperties) {
    if (options.extra.count(key)) {
      return absl::InvalidArgumentError(std::string("kafka consumer property ") + key +
                                        " is fixed by relay (offsets stored only after the effect); "
                                        "it cannot be overridden");
    }
  }
  internal::LoopOptions loop = internal::LoopOptionsFrom(options);
  auto registry = internal::RegistryOrOwn(metrics);
  auto source = std::make_unique<KafkaSource>(std::move(options), registry.get());
  if (auto s = source->Start(); !s.ok()) return s;
  return std::unique_ptr<Consumer>(
      std::make_unique<internal::LoopConsumer>(std::move(source), loop, dead_letters, std::move(registry)));
}

}  // namespace relay::kafka
