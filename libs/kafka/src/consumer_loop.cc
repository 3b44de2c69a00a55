#include "consumer_loop.h"

#include <algorithm>
#include <thread>

#include "absl/strings/cord.h"
#include "relay/base/log.h"

namespace relay::kafka {

namespace {
constexpr char kPoisonPayload[] = "type.relay.dev/relay.kafka.Poison";
}  // namespace

absl::Status PoisonError(std::string_view reason) {
  absl::Status status = absl::InvalidArgumentError(std::string(reason));
  status.SetPayload(kPoisonPayload, absl::Cord("poison"));
  return status;
}

bool IsPoison(const absl::Status& status) { return status.GetPayload(kPoisonPayload).has_value(); }

namespace internal {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

LoopConsumer::LoopConsumer(std::unique_ptr<Source> source, LoopOptions options, Producer* dead_letters,
                           std::shared_ptr<prometheus::Registry> metrics)
    : registry_(std::move(metrics)),
      source_(std::move(source)),
      options_(std::move(options)),
      dead_letters_(dead_letters),
      outcomes_(prometheus::BuildCounter()
                    .Name("relay_kafka_consumed_records_total")
                    .Help("Records handled by consumers, by outcome (done, dead_lettered, retried)")
                    .Register(*registry_)),
      done_(outcomes_.Add({{"outcome", "done"}})),
      dead_lettered_(outcomes_.Add({{"outcome", "dead_lettered"}})),
      retried_(outcomes_.Add({{"outcome", "retried"}})),
      batch_records_(prometheus::BuildHistogram()
                         .Name("relay_kafka_consumer_batch_records")
                         .Help("Records per batch handed to a handler")
                         .Register(*registry_)
                         .Add({}, prometheus::Histogram::BucketBoundaries{1, 10, 100, 1000, 10'000, 100'000})) {
  assign_backoff_ = options_.retry_backoff_min;
  source_->set_on_revoke([this](const std::vector<TopicPartition>& revoked) { OnRevoke(revoked); });
  source_->set_on_assign([this](const std::vector<TopicPartition>& assigned) { OnAssign(assigned); });
}

absl::Status LoopConsumer::Run(RecordHandler handler) {
  BatchOptions one;
  one.max_records = 1;
  one.max_wait = milliseconds(0);
  return RunBatches(one, [&handler](Batch& batch) -> absl::Status {
    absl::Status status = handler(batch.records()[0]);
    if (IsPoison(status)) {
      batch.Reject(0, std::string(status.message()));
      return absl::OkStatus();
    }
    return status;
  });
}

absl::Status LoopConsumer::RunBatches(BatchOptions options, BatchHandler handler) {
  options.max_records = std::max<size_t>(options.max_records, 1);
  while (!stop_) {
    if (absl::Status fatal = source_->Fatal(); !fatal.ok()) return Fail(fatal);
    RetryAssignDue();
    ResumeDue();
    milliseconds wait(100);
    const bool enough = options.enough_bytes > 0 && pending_bytes_ >= options.enough_bytes;
    if (enough) {
      wait = milliseconds(0);  // only what is waiting already; none: handed over below
    } else if (!pending_.empty()) {
      // Rounded up: rounded down, the last fraction of a millisecond would
      // be spent polling with a zero timeout, spinning (a profile of the
      // collector found 10% of its CPU there).
      auto left = std::chrono::ceil<milliseconds>(first_at_ + options.max_wait - Clock::now());
      wait = std::clamp(left, milliseconds(0), wait);
    }
    bool idle = true;  // nothing was waiting
    if (std::optional<ConsumedRecord> record = source_->Poll(wait)) {
      idle = false;
      auto it = backoff_.find({record->topic, record->partition});
      // A record fetched before its partition was paused: it comes again
      // after the rewind, in order.
      if (it != backoff_.end() && it->second.resume_at) continue;
      // A partition whose assignment hook has not succeeded yet: nothing of
      // it may be handed over; it is read again from here once it has.
      if (auto u = unready_.find({record->topic, record->partition}); u != unready_.end()) {
        if (!u->second || record->offset < *u->second) u->second = record->offset;
        continue;
      }
      if (pending_.empty()) first_at_ = Clock::now();
      pending_bytes_ += static_cast<int64_t>(record->key.size() + record->value.size());
      pending_.push_back(std::move(*record));
    }
    if (pending_.empty()) continue;
    bool full = pending_.size() >= options.max_records || pending_bytes_ >= options.max_bytes;
    if (full || (enough && idle) || Clock::now() >= first_at_ + options.max_wait) {
      if (absl::Status s = Deliver(handler); !s.ok()) return Fail(s);
    }
  }
  // A batch not yet handed over is simply not stored: whoever owns its
  // partitions next reads it again.
  pending_.clear();
  return source_->Close();
}

absl::Status LoopConsumer::Deliver(BatchHandler& handler) {
  Batch batch(std::move(pending_));
  pending_.clear();
  pending_bytes_ = 0;
  batch_records_.Observe(static_cast<double>(batch.records().size()));
  absl::Status status = handler(batch);
  if (!status.ok()) return RetryLater(batch.records(), status);
  for (const auto& [index, reason] : batch.rejected()) {
    const ConsumedRecord& record = batch.records().at(index);
    if (batch.IsHeld(record)) continue;  // not handled: it comes again
    Position where{record.topic, record.partition, record.offset};
    // Already dead-lettered by an earlier attempt of this batch.
    if (dead_lettered_positions_.count(where)) continue;
    absl::Status dl = DeadLetter(record, reason);
    if (dl.ok()) {
      dead_lettered_positions_.insert(where);
      dlq_failures_ = 0;
      SetHealth(absl::OkStatus());
      continue;
    }
    std::string at = record.topic + "/" + std::to_string(record.partition) + "@" + std::to_string(record.offset);
    std::string dlq = record.topic + options_.dead_letter_suffix;
    // A refusal that persists (no such topic, not authorized, too large):
    // storing the offset would skip the record and retrying cannot help, so
    // stop and say why; a restart after the fix redoes it. Three in a row,
    // so a passing metadata gap (a topic briefly unknown during a broker
    // restart) does not stop a consumer for good.
    if (IsPermanentProduceError(dl) && ++dlq_failures_ >= kPermanentDlqFailures) {
      return absl::FailedPreconditionError("dead-letter topic " + dlq + " refuses records (" +
                                           std::string(dl.message()) + "); " + at +
                                           " was neither dead-lettered nor skipped");
    }
    SetHealth(absl::UnavailableError("dead-letter write to " + dlq + " failing: " + std::string(dl.message())));
    return RetryLater(batch.records(), dl);
  }
  std::map<TopicPartition, int64_t> next;
  size_t handled = 0, rejected = 0, held = 0;
  for (const auto& r : batch.records()) {
    if (batch.IsHeld(r)) {
      ++held;
      continue;
    }
    ++handled;
    int64_t& n = next[{r.topic, r.partition}];
    n = std::max(n, r.offset + 1);
  }
  for (const auto& [index, reason] : batch.rejected()) rejected += batch.IsHeld(batch.records().at(index)) ? 0 : 1;
  for (const auto& [tp, offset] : next) {
    source_->Store(tp, offset);
    if (!batch.held().count(tp)) backoff_.erase(tp);
  }
  done_.Increment(static_cast<double>(handled - rejected));
  dead_lettered_.Increment(static_cast<double>(rejected));
  if (held > 0) {
    // Its dead letters are written: a held partition's earlier records do
    // not come again, and its held ones were never dead-lettered.
    dead_lettered_positions_.clear();
    return RewindAndPause(batch.held(), held, absl::UnavailableError("held by the handler"), /*failed=*/false);
  }
  dead_lettered_positions_.clear();  // the batch is stored: it will not come again
  return absl::OkStatus();
}

absl::Status LoopConsumer::RetryLater(const std::vector<ConsumedRecord>& records, const absl::Status& why) {
  std::map<TopicPartition, int64_t> first;
  for (const auto& r : records) {
    auto [it, inserted] = first.try_emplace({r.topic, r.partition}, r.offset);
    if (!inserted) it->second = std::min(it->second, r.offset);
  }
  retried_.Increment(static_cast<double>(records.size()));
  return RewindAndPause(first, records.size(), why, /*failed=*/true);
}

absl::Status LoopConsumer::RewindAndPause(const std::map<TopicPartition, int64_t>& first, size_t records,
                                          const absl::Status& why, bool failed) {
  auto now = Clock::now();
  for (const auto& [tp, offset] : first) {
    // Paused before the seek, so nothing fetched past the record can slip
    // through; the seek drops what was prefetched after it.
    source_->Pause(tp);
    absl::Status rewound = source_->Rewind(tp, offset);
    for (int attempt = 1; !rewound.ok() && attempt < 5 && !stop_; ++attempt) {
      std::this_thread::sleep_for(milliseconds(200));
      rewound = source_->Rewind(tp, offset);
    }
    if (!rewound.ok()) {
      // A later record of the partition could be handled and stored past
      // this one, skipping it: stop instead (nothing of it was stored).
      return absl::InternalError("cannot rewind " + tp.topic + "/" + std::to_string(tp.partition) + " to offset " +
                                 std::to_string(offset) + " after a failed record: " +
                                 std::string(rewound.message()));
    }
    auto [it, inserted] = backoff_.try_emplace(tp, Backoff{options_.retry_backoff_min, std::nullopt});
    it->second.resume_at = now + it->second.next;
    (failed ? log::Warn : log::Debug)(failed ? "record handling failed; partition paused for a retry"
                                             : "partition held by the handler; paused for a retry",
                                      {{"topic", tp.topic}, {"partition", tp.partition}, {"offset", offset},
                                       {"records", static_cast<int64_t>(records)},
                                       {"error", std::string(why.message())},
                                       {"backoff_ms", it->second.next.count()}});
    it->second.next = std::min(it->second.next * 2, options_.retry_backoff_max);
  }
  return absl::OkStatus();
}

absl::Status LoopConsumer::DeadLetter(const ConsumedRecord& record, const std::string& reason) {
  Record dlq{record.topic + options_.dead_letter_suffix, record.key, record.value, record.headers};
  dlq.headers.push_back({kDlqReasonHeader, reason});
  dlq.headers.push_back({kDlqTopicHeader, record.topic});
  dlq.headers.push_back({kDlqPartitionHeader, std::to_string(record.partition)});
  dlq.headers.push_back({kDlqOffsetHeader, std::to_string(record.offset)});
  absl::Status status = SendAndWait(*dead_letters_, std::move(dlq));
  if (status.ok()) {
    log::Warn("record dead-lettered", {{"topic", record.topic}, {"partition", record.partition},
                                       {"offset", record.offset}, {"reason", reason}});
  } else {
    log::Error("dead-letter write failed", {{"topic", record.topic}, {"partition", record.partition},
                                            {"offset", record.offset}, {"error", std::string(status.message())}});
  }
  return status;
}

void LoopConsumer::ResumeDue() {
  auto now = Clock::now();
  for (auto& [tp, b] : backoff_) {
    if (b.resume_at && *b.resume_at <= now) {
      source_->Resume(tp);
      b.resume_at.reset();  // the backoff stays until a success resets it
    }
  }
}

void LoopConsumer::OnAssign(const std::vector<TopicPartition>& assigned) {
  if (!options_.on_assign || assigned.empty()) return;
  absl::Status s = options_.on_assign(assigned);
  if (s.ok()) return;
  // Not the end of the consumer (a state load that hit its reader timeout
  // succeeds a moment later): the partitions wait, paused, and the hook is
  // tried again with a backoff while polling goes on (rebalances and other
  // partitions are served meanwhile).
  for (const auto& tp : assigned) {
    source_->Pause(tp);
    unready_.try_emplace(tp, std::nullopt);
  }
  AssignFailed(s);
}

void LoopConsumer::AssignFailed(const absl::Status& s) {
  assign_retry_at_ = Clock::now() + assign_backoff_;
  log::Warn("partition assignment hook failed; its partitions wait for a retry",
            {{"partitions", static_cast<int64_t>(unready_.size())}, {"error", std::string(s.message())},
             {"retry_in_ms", assign_backoff_.count()}});
  SetAssignHealth(absl::UnavailableError("partition assignment hook failing (retried every " +
                                         std::to_string(assign_backoff_.count()) + " ms): " + std::string(s.message())));
  assign_backoff_ = std::min(assign_backoff_ * 2, options_.retry_backoff_max);
}

void LoopConsumer::RetryAssignDue() {
  if (unready_.empty() || Clock::now() < assign_retry_at_) return;
  std::vector<TopicPartition> tps;
  for (const auto& [tp, first] : unready_) tps.push_back(tp);
  absl::Status s = options_.on_assign(tps);
  if (!s.ok()) return AssignFailed(s);
  for (auto it = unready_.begin(); it != unready_.end();) {
    // Records fetched while it waited were dropped: read them again.
    if (it->second) {
      if (absl::Status rewound = source_->Rewind(it->first, *it->second); !rewound.ok()) {
        AssignFailed(rewound);
        return;
      }
    }
    source_->Resume(it->first);
    it = unready_.erase(it);
  }
  assign_backoff_ = options_.retry_backoff_min;
  SetAssignHealth(absl::OkStatus());
  log::Info("partition assignment hook succeeded on a retry", {{"partitions", static_cast<int64_t>(tps.size())}});
}

void LoopConsumer::OnRevoke(const std::vector<TopicPartition>& revoked) {
  if (options_.on_revoke) options_.on_revoke(revoked);
  for (const auto& tp : revoked) {
    backoff_.erase(tp);
    unready_.erase(tp);
  }
  if (unready_.empty()) SetAssignHealth(absl::OkStatus());
  // Records of a revoked partition not yet handed over belong to its next
  // owner now; handing them over here would do their effect twice.
  auto gone = [&](const ConsumedRecord& r) {
    return std::find(revoked.begin(), revoked.end(), TopicPartition{r.topic, r.partition}) != revoked.end();
  };
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(), gone), pending_.end());
  pending_bytes_ = 0;
  for (const auto& r : pending_) pending_bytes_ += static_cast<int64_t>(r.key.size() + r.value.size());
}

absl::Status LoopConsumer::Fail(absl::Status status) {
  log::Error("consumer stopped", {{"error", std::string(status.message())}});
  SetHealth(status);
  (void)source_->Close();  // commits only what was stored: the failed record is not
  return status;
}

void LoopConsumer::SetHealth(absl::Status status) {
  std::lock_guard lock(health_mu_);
  health_ = std::move(status);
}

void LoopConsumer::SetAssignHealth(absl::Status status) {
  std::lock_guard lock(health_mu_);
  assign_health_ = std::move(status);
}

absl::Status LoopConsumer::Health() const {
  {
    // Fresh statuses, not copies: a copy shares its message with the one
    // kept here, and its reference count lives in the uninstrumented absl
    // library, so TSan would see the loop replacing the kept one as a race
    // with the caller reading the copy.
    std::lock_guard lock(health_mu_);
    if (!health_.ok()) return absl::Status(health_.code(), health_.message());
    if (!assign_health_.ok()) return absl::Status(assign_health_.code(), assign_health_.message());
  }
  return source_->Degraded();
}

}  // namespace internal
}  // namespace relay::kafka
