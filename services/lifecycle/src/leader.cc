#include "relay/lifecycle/leader.h"

#include <librdkafka/rdkafka.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "relay/base/log.h"
#include "relay/kafka/security.h"

namespace relay::lifecycle {
namespace {

using namespace std::chrono_literals;

absl::Status Set(rd_kafka_conf_t* conf, const std::string& k, const std::string& v) {
  char err[512];
  if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
    return absl::InvalidArgumentError(absl::StrCat("kafka ", k, ": ", err));
  }
  return absl::OkStatus();
}

class Elector final : public LeaderElector {
 public:
  Elector(LeaderOptions o, LeaderCallbacks cb) : o_(std::move(o)), cb_(std::move(cb)) {}
  ~Elector() override { Stop(); }

  absl::Status Init() {
    if (o_.instance.empty()) {
      char host[256] = {0};
      ::gethostname(host, sizeof host - 1);
      o_.instance = absl::StrCat(host, ":", ::getpid());
    }
    // The consumer: group membership only; it never reads records.
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    for (auto [k, v] : std::initializer_list<std::pair<std::string, std::string>>{
             {"bootstrap.servers", o_.bootstrap},
             {"group.id", o_.group_id},
             {"client.id", "relay-lifecycle-leader"},
             {"session.timeout.ms", std::to_string(o_.session_timeout.count())},
             {"heartbeat.interval.ms", std::to_string(o_.heartbeat_interval.count())},
             {"enable.auto.commit", "false"},
             {"enable.auto.offset.store", "false"},
             {"partition.assignment.strategy", "range"}}) {
      if (auto st = Set(conf, k, v); !st.ok()) {
        rd_kafka_conf_destroy(conf);
        return st;
      }
    }
    if (auto st = kafka::ApplySecurity(conf); !st.ok()) {
      rd_kafka_conf_destroy(conf);
      return st;
    }
    rd_kafka_conf_set_opaque(conf, this);
    rd_kafka_conf_set_rebalance_cb(conf, &Elector::OnRebalance);
    char err[512];
    consumer_ = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!consumer_) return absl::InvalidArgumentError(absl::StrCat("kafka consumer: ", err));
    rd_kafka_poll_set_consumer(consumer_);
    // The claim producer: idempotent, acks=all; its delivery report carries
    // the offset the broker gave the claim.
    rd_kafka_conf_t* pconf = rd_kafka_conf_new();
    for (auto [k, v] : std::initializer_list<std::pair<std::string, std::string>>{
             {"bootstrap.servers", o_.bootstrap},
             {"client.id", "relay-lifecycle-claims"},
             {"enable.idempotence", "true"},
             {"acks", "all"},
             {"message.timeout.ms", "10000"},
             {"linger.ms", "0"}}) {
      if (auto st = Set(pconf, k, v); !st.ok()) {
        rd_kafka_conf_destroy(pconf);
        return st;
      }
    }
    if (auto st = kafka::ApplySecurity(pconf); !st.ok()) {
      rd_kafka_conf_destroy(pconf);
      return st;
    }
    rd_kafka_conf_set_dr_msg_cb(pconf, &Elector::OnDelivery);
    producer_ = rd_kafka_new(RD_KAFKA_PRODUCER, pconf, err, sizeof err);
    if (!producer_) return absl::InvalidArgumentError(absl::StrCat("kafka producer: ", err));

    rd_kafka_topic_partition_list_t* topics = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(topics, o_.topic.c_str(), RD_KAFKA_PARTITION_UA);
    rd_kafka_resp_err_t e = rd_kafka_subscribe(consumer_, topics);
    rd_kafka_topic_partition_list_destroy(topics);
    if (e) return absl::UnavailableError(absl::StrCat("subscribe ", o_.topic, ": ", rd_kafka_err2str(e)));
    poller_ = std::thread([this] { Poll(); });
    worker_ = std::thread([this] { Work(); });
    return absl::OkStatus();
  }

  void Stop() override {
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      stopped_ = true;
      cv_.notify_all();
    }
    if (worker_.joinable()) worker_.join();
    if (poller_.joinable()) poller_.join();
    if (consumer_) {
      // Leaving the group runs the revoke callback (deposed) and lets a
      // standby take over without waiting for the session timeout.
      rd_kafka_consumer_close(consumer_);
      rd_kafka_destroy(consumer_);
      consumer_ = nullptr;
    }
    Depose();
    if (producer_) {
      rd_kafka_flush(producer_, 1000);
      rd_kafka_destroy(producer_);
      producer_ = nullptr;
    }
  }

  bool leading() const override { return leading_.load(); }

  absl::Status Health() const override {
    std::lock_guard lock(mu_);
    return last_error_.empty() ? absl::OkStatus() : absl::UnavailableError(last_error_);
  }

 private:
  static void OnRebalance(rd_kafka_t* rk, rd_kafka_resp_err_t err, rd_kafka_topic_partition_list_t* parts, void* opaque) {
    auto* self = static_cast<Elector*>(opaque);
    bool has_partition = false;
    for (int i = 0; i < parts->cnt; ++i) has_partition = has_partition || parts->elems[i].partition == 0;
    if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
      rd_kafka_assign(rk, parts);
      if (has_partition) {
        std::lock_guard lock(self->mu_);
        self->assigned_ = true;
        self->cv_.notify_all();
        log::Info("leader partition assigned", {{"instance", self->o_.instance}});
      }
    } else {
      // Stop acting before the partition is released.
      {
        std::lock_guard lock(self->mu_);
        self->assigned_ = false;
      }
      self->Depose();
      rd_kafka_assign(rk, nullptr);
    }
  }

  static void OnDelivery(rd_kafka_t*, const rd_kafka_message_t* m, void* opaque) {
    auto* self = static_cast<Elector*>(opaque ? opaque : m->_private);
    if (!self) return;
    std::lock_guard lock(self->mu_);
    self->claim_err_ = m->err;
    self->claim_offset_ = m->offset;
    self->claim_done_ = true;
    self->cv_.notify_all();
  }

  void Depose() {
    std::lock_guard elect(elect_mu_);  // an election in progress finishes first
    if (!leading_) return;
    leading_ = false;
    log::Info("deposed: stopping", {{"instance", o_.instance}});
    cb_.deposed();
  }

  void Poll() {
    while (true) {
      {
        std::lock_guard lock(mu_);
        if (stopped_) return;
      }
      if (rd_kafka_message_t* m = rd_kafka_consumer_poll(consumer_, 100)) {
        if (m->err && m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
          std::lock_guard lock(mu_);
          last_error_ = absl::StrCat("leader election: ", rd_kafka_message_errstr(m));
        }
        rd_kafka_message_destroy(m);
      }
      rd_kafka_poll(producer_, 0);
    }
  }

  // Appends a claim and returns its offset (the epoch), or an error when
  // the claim did not land or a later claim exists.
  absl::StatusOr<int64_t> Claim() {
    std::string value = absl::StrCat("{\"instance\":\"", o_.instance, "\"}");
    {
      std::lock_guard lock(mu_);
      claim_done_ = false;
    }
    rd_kafka_resp_err_t e = rd_kafka_producev(
        producer_, RD_KAFKA_V_TOPIC(o_.topic.c_str()), RD_KAFKA_V_PARTITION(0),
        RD_KAFKA_V_VALUE(value.data(), value.size()), RD_KAFKA_V_KEY("claim", 5), RD_KAFKA_V_OPAQUE(this),
        RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
    if (e) return absl::UnavailableError(absl::StrCat("claim: ", rd_kafka_err2str(e)));
    auto deadline = std::chrono::steady_clock::now() + 15s;
    while (true) {
      rd_kafka_poll(producer_, 50);
      std::lock_guard lock(mu_);
      if (claim_done_) break;
      if (stopped_ || std::chrono::steady_clock::now() > deadline) return absl::UnavailableError("claim not acknowledged");
    }
    int64_t offset;
    {
      std::lock_guard lock(mu_);
      if (claim_err_) return absl::UnavailableError(absl::StrCat("claim: ", rd_kafka_err2str(claim_err_)));
      offset = claim_offset_;
    }
    int64_t low = 0, high = 0;
    e = rd_kafka_query_watermark_offsets(producer_, o_.topic.c_str(), 0, &low, &high, 5000);
    if (e) return absl::UnavailableError(absl::StrCat("leader topic offsets: ", rd_kafka_err2str(e)));
    if (high > offset + 1) return absl::AbortedError(absl::StrCat("a later claim exists (offset ", high - 1, ")"));
    return offset;
  }

  void Work() {
    while (true) {
      {
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, 1s, [this] { return stopped_ || (assigned_ && !leading_); });
        if (stopped_) return;
        if (!assigned_ || leading_) continue;
      }
      std::lock_guard elect(elect_mu_);
      {
        std::lock_guard lock(mu_);
        if (!assigned_ || stopped_) continue;
      }
      auto epoch = Claim();
      if (!epoch.ok()) {
        log::Warn("leader claim failed; retrying", {{"error", std::string(epoch.status().message())}});
        {
          std::lock_guard lock(mu_);
          last_error_ = "leader claim: " + std::string(epoch.status().message());
        }
        std::this_thread::sleep_for(1s);
        continue;
      }
      if (auto st = cb_.elected(*epoch); !st.ok()) {
        log::Warn("takeover failed; retrying", {{"epoch", *epoch}, {"error", std::string(st.message())}});
        {
          std::lock_guard lock(mu_);
          last_error_ = "takeover: " + std::string(st.message());
        }
        std::this_thread::sleep_for(1s);
        continue;
      }
      leading_ = true;
      std::lock_guard lock(mu_);
      last_error_.clear();
      log::Info("elected", {{"instance", o_.instance}, {"epoch", *epoch}});
    }
  }

  LeaderOptions o_;
  LeaderCallbacks cb_;
  rd_kafka_t* consumer_ = nullptr;
  rd_kafka_t* producer_ = nullptr;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::mutex elect_mu_;
  bool assigned_ = false, stopped_ = false, claim_done_ = false;
  rd_kafka_resp_err_t claim_err_ = RD_KAFKA_RESP_ERR_NO_ERROR;
  int64_t claim_offset_ = -1;
  std::string last_error_;
  std::atomic<bool> leading_{false};
  std::thread poller_, worker_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<LeaderElector>> LeaderElector::Start(LeaderOptions options, LeaderCallbacks callbacks) {
  auto e = std::make_unique<Elector>(std::move(options), std::move(callbacks));
  if (auto st = e->Init(); !st.ok()) return st;
  return std::unique_ptr<LeaderElector>(std::move(e));
}

}  // namespace relay::lifecycle
