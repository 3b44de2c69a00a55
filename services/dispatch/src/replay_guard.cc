#include "relay/dispatch/replay_guard.h"

#include "absl/strings/ascii.h"
#include "relay/base/log.h"
#include "relay/dispatch/ledger.h"

namespace relay::dispatch {

std::string PullRequestKey(const v1::PullRequestLabels& fact) {
  return absl::AsciiStrToLower(fact.upstream_repo()) + "#" + std::to_string(fact.number());
}

github::EventTime EventTimeOf(const v1::PullRequestLabels& fact) {
  return {fact.event_at_unix_ms(), fact.received_at_unix_ms()};
}

std::string NotFresh(const kafka::ConsumedRecord& record, int64_t received_at_unix_ms, int64_t handled_through,
                     int64_t now_unix_ms, int64_t ledger_retention_ms, std::string* detail) {
  if (record.FindHeader(kafka::kReplayedFromHeader) != nullptr) return "replayed";
  if (record.offset < handled_through) return "read_again";
  // Intake's time first: a redriven dead letter is a new Kafka record.
  int64_t at = received_at_unix_ms > 0 ? received_at_unix_ms : record.timestamp_ms;
  if (absl::Status within = CheckWithinLedgerMemory(at, now_unix_ms, ledger_retention_ms); !within.ok()) {
    *detail = std::string(within.message());
    return "stale";
  }
  return "";
}

absl::Status LabelFacts::Load() {
  std::map<std::string, github::EventTime> newest;
  auto end = reader_->ReadToEnd(topic_, {}, [&](const kafka::ConsumedRecord& r) {
    v1::PullRequestLabels fact;
    if (r.value.empty() || !fact.ParseFromString(r.value)) return absl::OkStatus();
    auto [it, added] = newest.try_emplace(PullRequestKey(fact), EventTimeOf(fact));
    if (!added) it->second = std::max(it->second, EventTimeOf(fact));
    return absl::OkStatus();
  });
  if (!end.ok()) return absl::UnavailableError("label facts " + topic_ + ": " + std::string(end.status().message()));
  size_t n = newest.size();
  {
    std::lock_guard lock(mu_);
    newest_ = std::move(newest);
  }
  log::Info("label facts loaded", {{"topic", topic_}, {"pull_requests", static_cast<int64_t>(n)}});
  return absl::OkStatus();
}

bool LabelFacts::Offer(const v1::PullRequestLabels& fact) {
  std::lock_guard lock(mu_);
  auto [it, added] = newest_.try_emplace(PullRequestKey(fact), EventTimeOf(fact));
  if (added) return true;
  if (EventTimeOf(fact) <= it->second) return false;
  it->second = EventTimeOf(fact);
  return true;
}

size_t LabelFacts::size() const {
  std::lock_guard lock(mu_);
  return newest_.size();
}

}  // namespace relay::dispatch
