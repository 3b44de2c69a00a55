#include "relay/collector/label_table.h"

#include "absl/strings/ascii.h"

namespace relay::collector {
namespace {

std::string Key(const std::string& upstream_repo, int64_t pr) {
  return absl::AsciiStrToLower(upstream_repo) + "#" + std::to_string(pr);
}

}  // namespace

bool LabelTable::Apply(const v1::PullRequestLabels& fact) {
  github::EventTime at{fact.event_at_unix_ms(), fact.received_at_unix_ms()};
  std::lock_guard lock(mu_);
  auto [it, added] = prs_.try_emplace(Key(fact.upstream_repo(), fact.number()));
  if (!added && at <= it->second.at) return false;
  it->second.at = at;
  it->second.devices = std::set<std::string>(fact.crcr_devices().begin(), fact.crcr_devices().end());
  return true;
}

std::set<std::string> LabelTable::Devices(const std::string& upstream_repo, int64_t pr) const {
  std::lock_guard lock(mu_);
  auto it = prs_.find(Key(upstream_repo, pr));
  return it == prs_.end() ? std::set<std::string>{} : it->second.devices;
}

}  // namespace relay::collector
