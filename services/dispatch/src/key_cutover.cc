#include "relay/dispatch/key_cutover.h"

#include "absl/strings/numbers.h"
#include "relay/base/log.h"
#include "relay/github/webhook_key.h"
#include "relay/kafka/cluster_admin.h"
#include "relay/kafka/reader.h"

namespace relay::dispatch {

bool PartitionPassed(const PartitionProgress& p, int64_t now_unix_ms, int64_t keys_from_unix_ms) {
  // At an ordered record: everything before it is handled, and a holder
  // sits exactly there (a later record keyed by repository is the late
  // exception).
  const int64_t of_this_switch = keys_from_unix_ms - kCutoverBound.count();
  if (p.next_ordered) return *p.next_ordered && p.next_timestamp_ms >= of_this_switch;
  // At the end. The last record ordered: the switch is behind this partition.
  if (p.previous_ordered.value_or(false) && p.previous_timestamp_ms >= of_this_switch) return true;
  // Nothing new since the last record keyed by repository (or none at all):
  // done once no intake can write such a record any more.
  return now_unix_ms >= keys_from_unix_ms + kCutoverBound.count();
}

bool HasOrderedKeys(const kafka::ConsumedRecord& record, int64_t* keys_from) {
  const std::string* version = record.FindHeader(github::kWebhookKeysHeader);
  if (version == nullptr || *version != github::kOrderedKeysVersion) return false;
  *keys_from = 0;
  if (const std::string* from = record.FindHeader(github::kWebhookKeysFromHeader)) {
    (void)absl::SimpleAtoi(*from, keys_from);
  }
  return true;
}

ProgressSource KafkaProgress(std::string bootstrap, std::string topic, std::string group) {
  return [bootstrap = std::move(bootstrap), topic = std::move(topic),
          group = std::move(group)]() -> absl::StatusOr<std::map<int32_t, PartitionProgress>> {
    using namespace std::chrono_literals;
    auto admin = kafka::NewClusterAdmin(bootstrap, 10s);
    if (!admin.ok()) return admin.status();
    kafka::ReaderOptions ro;
    ro.bootstrap = bootstrap;
    ro.client_id = "relay-dispatch-cutover";
    ro.timeout = 10s;
    auto reader = kafka::NewKafkaTopicReader(ro);
    if (!reader.ok()) return reader.status();
    auto offsets = (*admin)->Offsets(topic);
    if (!offsets.ok()) return offsets.status();
    auto committed = (*admin)->CommittedOffsets(group);
    if (!committed.ok()) return committed.status();
    // nullopt for no record there; an error for a read that failed.
    auto ordered_at = [&](int32_t partition, int64_t offset,
                          int64_t* timestamp_ms) -> absl::StatusOr<std::optional<bool>> {
      auto r = (*reader)->ReadAt(topic, partition, offset);
      if (absl::IsNotFound(r.status())) return std::optional<bool>();
      if (!r.ok()) return r.status();
      *timestamp_ms = r->timestamp_ms;
      int64_t from = 0;
      return std::optional<bool>(HasOrderedKeys(*r, &from));
    };
    std::map<int32_t, PartitionProgress> out;
    for (const auto& [partition, o] : *offsets) {
      PartitionProgress p;
      p.end = o.high;
      auto c = committed->find({topic, partition});
      p.position = std::clamp(c != committed->end() && c->second >= 0 ? c->second : o.low, o.low, o.high);
      if (p.position < p.end) {
        auto next = ordered_at(partition, p.position, &p.next_timestamp_ms);
        if (!next.ok()) return next.status();
        p.next_ordered = *next;
      } else if (p.position > o.low) {
        auto previous = ordered_at(partition, p.position - 1, &p.previous_timestamp_ms);
        if (!previous.ok()) return previous.status();
        p.previous_ordered = *previous;
      }
      out[partition] = p;
    }
    return out;
  };
}

KeyCutover::KeyCutover(ProgressSource progress, const Clock* clock, std::chrono::milliseconds recheck,
                       prometheus::Registry* metrics)
    : progress_(std::move(progress)),
      clock_(clock),
      recheck_(recheck),
      holds_(prometheus::BuildCounter()
                 .Name("relay_dispatch_cutover_holds_total")
                 .Help("Times a github.webhooks partition was held at a record with ordered keys until every "
                       "partition's records keyed by repository were handled (the key cut-over)")
                 .Register(*metrics)
                 .Add({})) {}

bool KeyCutover::MayHandle(const kafka::ConsumedRecord& record) {
  int64_t keys_from = 0;
  if (!HasOrderedKeys(record, &keys_from) || (passed_from_ && keys_from <= *passed_from_)) return true;
  auto now = clock_->Now();
  if (checked_at_ && now - *checked_at_ < recheck_) {
    holds_.Increment();
    return false;
  }
  checked_at_ = now;
  auto progress = progress_();
  if (!progress.ok()) {
    log::Warn("key cut-over: the group's progress could not be read; records with ordered keys wait",
              {{"error", std::string(progress.status().message())}});
    holds_.Increment();
    return false;
  }
  std::vector<int64_t> waiting;
  for (const auto& [partition, p] : *progress) {
    if (!PartitionPassed(p, clock_->UnixMillis(), keys_from)) waiting.push_back(partition);
  }
  if (!waiting.empty()) {
    log::Info("key cut-over: records with ordered keys wait for partitions still holding records keyed by repository",
              {{"waiting_partitions", static_cast<int64_t>(waiting.size())}, {"first", waiting.front()}});
    holds_.Increment();
    return false;
  }
  passed_from_ = keys_from;
  checked_at_.reset();
  log::Info("key cut-over passed: every record keyed by repository before it is handled",
            {{"keys_from_unix_ms", keys_from}, {"partitions", static_cast<int64_t>(progress->size())}});
  return true;
}

}  // namespace relay::dispatch
