// The transactional producer (producer.h: ProducerOptions::transactional_id).
//
// One committer thread owns the librdkafka handle's transactions: it takes
// every record sent since the last transaction, produces them in one
// transaction and commits it; callbacks run once the commit answered. A
// transaction per record would be correct too, but each commit is a round
// trip to the transaction coordinator: grouping keeps a burst of writes at
// the cost of one.
//
// Errors, classified by librdkafka's own txn error flags:
//   - fatal (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, ...): another producer
//     with the same transactional.id took over. Every record in hand and
//     every later Send fails with FencedError; the handle is never replaced
//     (a new one would fence the new owner in turn). Unless the id is this
//     process's alone (renew_after_fatal): then no one else can have taken
//     it, the records in hand fail with Unavailable, and a new handle of the
//     same id carries on (Renew).
//   - abortable: the transaction is aborted, its records fail with
//     Unavailable (none became visible), the producer goes on.
//   - retriable (a commit that timed out): the commit is tried again until
//     the delivery timeout.
//   - with group_offsets, the group coordinator refusing the offsets
//     (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID: the member
//     is stale; librdkafka makes it abortable): aborted, its records fail
//     with GroupFencedError.
#include <librdkafka/rdkafka.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "absl/strings/cord.h"
#include "prometheus/counter.h"
#include "prometheus/histogram.h"
#include "relay/base/log.h"
#include "relay/base/status.h"
#include "relay/kafka/errors.h"
#include "relay/kafka/producer.h"
#include "relay/kafka/security.h"
#include "rdkafka_util.h"

namespace relay::kafka {

namespace {
constexpr char kFencedPayload[] = "type.relay.dev/relay.kafka.Fenced";
constexpr char kGroupFencedPayload[] = "type.relay.dev/relay.kafka.GroupFenced";

bool IsStaleMember(rd_kafka_resp_err_t code) {
  return code == RD_KAFKA_RESP_ERR_ILLEGAL_GENERATION || code == RD_KAFKA_RESP_ERR_UNKNOWN_MEMBER_ID ||
         code == RD_KAFKA_RESP_ERR_FENCED_INSTANCE_ID || code == RD_KAFKA_RESP_ERR_REBALANCE_IN_PROGRESS;
}
}  // namespace

absl::Status GroupFencedError(std::string_view reason) {
  absl::Status status = absl::UnavailableError(std::string(reason));
  status.SetPayload(kGroupFencedPayload, absl::Cord("group-fenced"));
  return status;
}

bool IsGroupFenced(const absl::Status& status) { return status.GetPayload(kGroupFencedPayload).has_value(); }

absl::Status FencedError(std::string_view reason) {
  absl::Status status = absl::FailedPreconditionError(std::string(reason));
  status.SetPayload(kFencedPayload, absl::Cord("fenced"));
  return status;
}

bool IsFenced(const absl::Status& status) { return status.GetPayload(kFencedPayload).has_value(); }

namespace internal {
namespace {

struct Item {
  Record record;
  DeliveryCallback done;
};

class TransactionalProducer final : public Producer {
 public:
  TransactionalProducer(ProducerOptions options, prometheus::Registry* metrics)
      : options_(std::move(options)),
        own_registry_(metrics ? nullptr : std::make_shared<prometheus::Registry>()),
        registry_(metrics ? metrics : own_registry_.get()),
        transactions_(prometheus::BuildCounter()
                          .Name("relay_kafka_transactions_total")
                          .Help("Producer transactions, by result (committed, aborted, group_fenced, fenced, renewed)")
                          .Register(*registry_)),
        seconds_(prometheus::BuildHistogram()
                     .Name("relay_kafka_transaction_seconds")
                     .Help("Producer transactions from begin to the commit's answer (committed ones)")
                     .Register(*registry_)
                     .Add({}, prometheus::Histogram::BucketBoundaries{0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2,
                                                                      0.5, 1, 2, 5})) {}

  ~TransactionalProducer() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (committer_.joinable()) committer_.join();
    FailAll(absl::CancelledError("producer closed"));
    if (rk_) rd_kafka_destroy(rk_);
  }

  absl::Status Start() {
    RELAY_RETURN_IF_ERROR(MakeHandle());
    connected_ = true;
    committer_ = std::thread([this] { Commit(); });
    return absl::OkStatus();
  }

  // rk_, its id's earlier producers fenced (init_transactions).
  absl::Status MakeHandle() {
    char err[512];
    rd_kafka_conf_t* conf = rd_kafka_conf_new();
    auto timeout = std::max<std::chrono::milliseconds>(options_.delivery_timeout, std::chrono::milliseconds(1000));
    std::vector<std::pair<std::string, std::string>> props = {
        {"bootstrap.servers", options_.bootstrap},
        {"client.id", options_.client_id},
        {"transactional.id", options_.transactional_id},
        {"enable.idempotence", "true"},
        {"acks", "all"},
        {"linger.ms", std::to_string(options_.linger.count())},
        {"compression.codec", options_.compression},
        {"message.timeout.ms", std::to_string(timeout.count())},
        // A transaction left open by a process that died blocks
        // read_committed readers of its partitions until this passes (a new
        // producer of the same id ends it at once).
        {"transaction.timeout.ms", std::to_string(options_.transaction_timeout.count() > 0
                                                      // librdkafka refuses one below message.timeout.ms
                                                      ? std::max<int64_t>(timeout.count(), options_.transaction_timeout.count())
                                                      : std::max<int64_t>(10'000, timeout.count() * 2))},
        {"message.max.bytes", std::to_string(options_.message_max_bytes)},
        // A transaction is a chain of small requests, each waited for
        // (AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn):
        // Nagle's algorithm would hold each behind the last one's ACK, as
        // the plain producer's setting says.
        {"socket.nagle.disable", "true"},
        // Back-to-back transactions: the broker answers the next one's
        // AddPartitionsToTxn with CONCURRENT_TRANSACTIONS until the last
        // one's markers are written, and librdkafka 2.0 retries it after
        // retry.backoff.ms (100 ms by default), so every transaction after a
        // busy one took ~100 ms. Java's client retries that error after
        // 20 ms for this reason (KAFKA-5477); 10 ms here. It is this
        // producer's backoff for every request (it sends few), not the
        // plain producer's.
        {"retry.backoff.ms", "10"},
    };
    for (auto& kv : SecurityProperties()) props.emplace_back(std::move(kv));
    for (const auto& kv : options_.extra) props.emplace_back(kv);
    for (const auto& [k, v] : props) {
      if (rd_kafka_conf_set(conf, k.c_str(), v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
        rd_kafka_conf_destroy(conf);
        return absl::InvalidArgumentError("kafka transactional producer property " + k + ": " + err);
      }
    }
    RouteLogs(conf);
    rd_kafka_conf_set_opaque(conf, this);
    rd_kafka_conf_set_error_cb(conf, [](rd_kafka_t*, int code, const char*, void* opaque) {
      auto* self = static_cast<TransactionalProducer*>(opaque);
      if (code == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) self->connected_ = false;
    });
    rk_ = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk_) {
      rd_kafka_conf_destroy(conf);
      return absl::InvalidArgumentError(std::string("kafka transactional producer: ") + err);
    }
    // The fencing: the broker bumps the id's epoch, ends whatever
    // transaction an earlier producer of the id left open, and refuses that
    // producer from now on.
    if (rd_kafka_error_t* e = rd_kafka_init_transactions(rk_, static_cast<int>(timeout.count() * 2))) {
      absl::Status st = TxnError(e, "init_transactions");
      rd_kafka_destroy(rk_);
      rk_ = nullptr;
      return st;
    }
    log::Info("transactional producer ready; earlier producers of its id are fenced",
              {{"transactional_id", options_.transactional_id}});
    return absl::OkStatus();
  }

  // After a fatal error, with an id no one else holds: a new handle of the
  // same id, tried every second until it is made or the producer closes
  // (false then; rk_ is null).
  bool Renew() {
    connected_ = false;
    for (;;) {
      if (rk_) rd_kafka_destroy(rk_);
      rk_ = nullptr;
      if (Stopping()) return false;
      absl::Status made = MakeHandle();
      if (made.ok()) {
        connected_ = true;
        return true;
      }
      log::Warn("transactional producer not made again yet; retrying in 1 s",
                {{"transactional_id", options_.transactional_id}, {"error", std::string(made.message())}});
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stop_; });
    }
  }

  void Send(Record record, DeliveryCallback done) override {
    {
      std::lock_guard lock(mu_);
      if (fenced_.ok() && !stop_) {
        queue_.push_back(Item{std::move(record), std::move(done)});
        cv_.notify_all();
        return;
      }
    }
    absl::Status why = Fenced();
    std::move(done)(why.ok() ? absl::CancelledError("producer closed") : why);
  }

  absl::Status Flush(std::chrono::milliseconds timeout) override {
    std::unique_lock lock(mu_);
    if (!idle_cv_.wait_for(lock, timeout, [this] { return queue_.empty() && !committing_; })) {
      return absl::DeadlineExceededError(std::to_string(queue_.size()) + " records not yet in a committed transaction");
    }
    return absl::OkStatus();
  }

  bool Connected() const override {
    std::lock_guard lock(mu_);
    return connected_ && fenced_.ok();
  }

 private:
  absl::Status Fenced() const {
    std::lock_guard lock(mu_);
    return fenced_;
  }

  absl::Status TxnError(rd_kafka_error_t* e, const char* what) {
    std::string why = std::string(what) + ": " + rd_kafka_error_name(e) + ": " + rd_kafka_error_string(e);
    absl::Status st = rd_kafka_error_is_fatal(e)
                          ? FencedError("fenced: another producer of transactional id " + options_.transactional_id +
                                        " took over (" + why + ")")
                          : absl::UnavailableError(why);
    rd_kafka_error_destroy(e);
    return st;
  }

  // The committer thread: a transaction for whatever queued meanwhile.
  void Commit() {
    for (;;) {
      std::deque<Item> batch;
      {
        std::unique_lock lock(mu_);
        // Woken by a Send; every 100 ms regardless, to serve librdkafka's
        // callbacks (errors, logs).
        while (!stop_ && queue_.empty()) {
          lock.unlock();
          rd_kafka_poll(rk_, 0);
          lock.lock();
          cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return stop_ || !queue_.empty(); });
        }
        if (stop_ && queue_.empty()) return;
        batch.swap(queue_);
        committing_ = true;
      }
      auto began = std::chrono::steady_clock::now();
      absl::Status result = Transaction(batch);
      bool renew = false;  // a fatal error on an id of this process's alone
      if (result.ok()) {
        transactions_.Add({{"result", "committed"}}).Increment();
        seconds_.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count());
      } else if (IsGroupFenced(result)) {
        transactions_.Add({{"result", "group_fenced"}}).Increment();
        log::Warn("transaction refused by the group coordinator (this member is stale); its records failed",
                  {{"error", std::string(result.message())}, {"records", static_cast<int64_t>(batch.size())}});
      } else if (IsFenced(result) && options_.renew_after_fatal) {
        transactions_.Add({{"result", "renewed"}}).Increment();
        log::Warn("transactional producer hit a fatal error; its records failed and a new producer of the same id "
                  "(this process's alone) carries on",
                  {{"transactional_id", options_.transactional_id}, {"error", std::string(result.message())},
                   {"records", static_cast<int64_t>(batch.size())}});
        result = absl::UnavailableError("not committed: the transactional producer hit a fatal error and was made "
                                        "again (" + std::string(result.message()) + ")");
        renew = true;
      } else if (IsFenced(result)) {
        transactions_.Add({{"result", "fenced"}}).Increment();
        log::Error("transactional producer fenced; its records and every later one fail",
                   {{"transactional_id", options_.transactional_id}, {"error", std::string(result.message())}});
        std::lock_guard lock(mu_);
        fenced_ = result;
      } else {
        transactions_.Add({{"result", "aborted"}}).Increment();
        log::Warn("transaction aborted; its records failed", {{"error", std::string(result.message())},
                                                               {"records", static_cast<int64_t>(batch.size())}});
      }
      for (auto& item : batch) std::move(item.done)(result);
      if (IsFenced(result)) FailAll(result);
      const bool closed = renew && !Renew();
      {
        std::lock_guard lock(mu_);
        committing_ = false;
      }
      idle_cv_.notify_all();
      if (closed) return;
    }
  }

  absl::Status Transaction(std::deque<Item>& batch) {
    auto timeout = std::max<std::chrono::milliseconds>(options_.delivery_timeout, std::chrono::milliseconds(1000));
    if (rd_kafka_error_t* e = rd_kafka_begin_transaction(rk_)) return TxnError(e, "begin_transaction");
    absl::Status produced = absl::OkStatus();
    for (auto& item : batch) {
      const Record& r = item.record;
      rd_kafka_headers_t* headers = rd_kafka_headers_new(r.headers.size());
      for (const auto& [k, v] : r.headers) rd_kafka_header_add(headers, k.data(), k.size(), v.data(), v.size());
      rd_kafka_resp_err_t err = rd_kafka_producev(
          rk_, RD_KAFKA_V_TOPIC(r.topic.c_str()), RD_KAFKA_V_PARTITION(r.partition >= 0 ? r.partition : RD_KAFKA_PARTITION_UA),
          RD_KAFKA_V_KEY(r.key.data(), r.key.size()), RD_KAFKA_V_VALUE(const_cast<char*>(r.value.data()), r.value.size()),
          RD_KAFKA_V_HEADERS(headers), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_END);
      if (err) {
        rd_kafka_headers_destroy(headers);  // not taken on failure
        produced = ToStatus(err, ("produce to " + r.topic).c_str());
        break;
      }
    }
    bool stale_member = false;
    if (produced.ok() && options_.group_offsets) produced = SendOffsets(timeout, &stale_member);
    if (produced.ok()) {
      // A commit that timed out is still in progress in librdkafka: the
      // only call it takes next is the same commit again (anything else is
      // refused as _CONFLICT, for this transaction and every later one), so
      // a retriable error is answered by committing again, until it is
      // decided or the producer closes.
      for (;;) {
        rd_kafka_error_t* e = rd_kafka_commit_transaction(rk_, static_cast<int>(timeout.count()));
        if (!e) return absl::OkStatus();
        if (rd_kafka_error_is_fatal(e)) return TxnError(e, "commit_transaction");
        stale_member = stale_member || IsStaleMember(rd_kafka_error_code(e));
        if (!rd_kafka_error_is_retriable(e) || Stopping()) {
          produced = TxnError(e, "commit_transaction");
          break;
        }
        log::Warn("commit_transaction not answered yet; committing again",
                  {{"error", std::string(rd_kafka_error_string(e))}});
        rd_kafka_error_destroy(e);
      }
    }
    // Nothing of it becomes visible; the next transaction starts clean. An
    // abort that timed out is likewise only resumed by aborting again.
    for (;;) {
      rd_kafka_error_t* e = rd_kafka_abort_transaction(rk_, static_cast<int>(timeout.count()));
      if (!e) break;
      bool again = rd_kafka_error_is_retriable(e) && !rd_kafka_error_is_fatal(e) && !Stopping();
      absl::Status abort = TxnError(e, "abort_transaction");
      if (IsFenced(abort)) return abort;
      log::Warn(again ? "abort_transaction not answered yet; aborting again" : "abort_transaction failed",
                {{"error", std::string(abort.message())}});
      if (!again) break;
    }
    std::string why = "not committed: " + std::string(produced.message());
    return stale_member ? GroupFencedError(why) : absl::UnavailableError(why);
  }

  bool Stopping() const {
    std::lock_guard lock(mu_);
    return stop_;
  }

  // The group's offsets into the open transaction (group_offsets): the
  // coordinator checks the member's generation here.
  absl::Status SendOffsets(std::chrono::milliseconds timeout, bool* stale_member) {
    absl::StatusOr<GroupOffsets> got = options_.group_offsets();
    if (!got.ok()) return got.status();
    if (!got->member || got->next_offsets.empty()) {
      return absl::UnavailableError("no group membership or no offsets to fence the transaction with");
    }
    rd_kafka_topic_partition_list_t* list =
        rd_kafka_topic_partition_list_new(static_cast<int>(got->next_offsets.size()));
    for (const auto& [tp, next] : got->next_offsets) {
      rd_kafka_topic_partition_list_add(list, tp.topic.c_str(), tp.partition)->offset = next;
    }
    // Timed out, the call is still in progress: resumed by calling it again.
    rd_kafka_error_t* e = nullptr;
    while ((e = rd_kafka_send_offsets_to_transaction(rk_, list, got->member->metadata,
                                                     static_cast<int>(timeout.count()))) &&
           rd_kafka_error_is_retriable(e) && !rd_kafka_error_is_fatal(e) && !Stopping()) {
      log::Warn("send_offsets_to_transaction not answered yet; sending again",
                {{"error", std::string(rd_kafka_error_string(e))}});
      rd_kafka_error_destroy(e);
    }
    rd_kafka_topic_partition_list_destroy(list);
    if (!e) return absl::OkStatus();
    if (rd_kafka_error_is_fatal(e)) return TxnError(e, "send_offsets_to_transaction");
    *stale_member = IsStaleMember(rd_kafka_error_code(e));
    return TxnError(e, "send_offsets_to_transaction");
  }

  void FailAll(const absl::Status& why) {
    std::deque<Item> left;
    {
      std::lock_guard lock(mu_);
      left.swap(queue_);
    }
    for (auto& item : left) std::move(item.done)(why);
    idle_cv_.notify_all();
  }

  ProducerOptions options_;
  std::shared_ptr<prometheus::Registry> own_registry_;
  prometheus::Registry* registry_;
  prometheus::Family<prometheus::Counter>& transactions_;
  prometheus::Histogram& seconds_;
  rd_kafka_t* rk_ = nullptr;
  std::thread committer_;
  mutable std::mutex mu_;
  std::condition_variable cv_;       // records queued, or stop
  std::condition_variable idle_cv_;  // nothing queued or committing
  std::deque<Item> queue_;
  bool committing_ = false;
  bool stop_ = false;
  std::atomic<bool> connected_{false};  // written by librdkafka's error callback too
  absl::Status fenced_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Producer>> NewTransactionalProducer(ProducerOptions options,
                                                                   prometheus::Registry* metrics) {
  auto p = std::make_unique<TransactionalProducer>(std::move(options), metrics);
  if (auto s = p->Start(); !s.ok()) return s;
  return std::unique_ptr<Producer>(std::move(p));
}

}  // namespace internal
}  // namespace relay::kafka
