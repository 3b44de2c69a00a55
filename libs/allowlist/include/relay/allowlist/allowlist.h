// The allowlist of downstream repositories and their levels, in the shape
// of the reference relay's allowlist.yaml:
//
//   L1: [org/repo, ...]                       dispatch only
//   L2: [org/repo, ...]                       + results recorded
//   L3:                                       + upstream check runs when the
//     device:                                   PR carries ciflow/crcr/<device>
//       org/repo: [oncall, oncall]
//   L4:                                       + check runs always
//     - org/repo: "oncall, oncall"
//
// A bare "org/repo" item is accepted at every level (under an L3 device, as
// a list item). Oncalls are a list or a comma-separated string. A repo may
// appear once in the whole file. Repository names compare
// case-insensitively, as GitHub's do. Used by dispatch and collector.
//
// Beside the levels, what each repository wants dispatched (read by
// dispatch; a repository not listed here gets what every repository got
// before subscriptions existed, Subscription::Default()):
//
//   subscriptions:
//     org/repo:
//       events: [pull_request.opened, pull_request.synchronize, push]
//       labels: [ciflow/trunk, ciflow/rocm*]
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace relay::allowlist {

enum class Level { kL1 = 1, kL2 = 2, kL3 = 3, kL4 = 4 };
std::string_view LevelName(Level level);  // "L1".."L4"

// GitHub's repository names: owner 1-39 of [A-Za-z0-9-], name 1-100 of
// [A-Za-z0-9._-], never "." or "..". Everything that puts a repository into
// an API path checks it with this.
bool IsValidRepoName(std::string_view repo);

// The upstream events a downstream repository asks to be dispatched.
//   events: "push" (every push but a branch deletion), "pull_request" (its
//     opened, reopened, synchronize and closed), or one action of it:
//     "pull_request.<action>" with action one of kPullRequestActions
//     (labeled included: a dispatch when a label is added).
//   labels: when not empty, a pull_request event is wanted only when the
//     PR carries a label matching one of them (for `labeled`: the label
//     added matches); "prefix*" matches every label starting with prefix.
//     Pushes carry no labels: not filtered by them.
struct Subscription {
  std::set<std::string> events;  // "push", "pull_request.opened", ... (expanded)
  std::vector<std::string> labels;

  // What every repository got before subscriptions: pull_request opened,
  // reopened, synchronize and closed, and push; any labels.
  static const Subscription& Default();
  // `event` with `action` (empty for push) is one it asks for.
  bool WantsEvent(std::string_view event, std::string_view action) const;
  // A label name matching one of `labels`.
  bool MatchesLabel(std::string_view label) const;
};

// The pull_request actions a subscription may name.
inline constexpr std::string_view kPullRequestActions[] = {"opened", "reopened", "synchronize", "closed",
                                                           "labeled"};

struct Entry {
  std::string repo;  // as written, e.g. "Intel/torch-xpu"
  Level level = Level::kL1;
  std::string device;  // L3 only: the ciflow/crcr/<device> label that asks for check runs
  std::vector<std::string> oncalls;
  Subscription subscription = Subscription::Default();
  bool subscribed = false;  // the file gives it a subscription (else the default)
};

// Immutable once built; share it as shared_ptr<const Allowlist>.
class Allowlist {
 public:
  // InvalidArgument naming the file and what is wrong (YAML syntax, shape,
  // a malformed repo name, a repo listed twice; a subscription of a repo in
  // no level, of an unknown event or action, or with an unknown key).
  static absl::StatusOr<Allowlist> Parse(std::string_view yaml, std::string_view origin);
  static absl::StatusOr<Allowlist> Load(const std::string& path);

  // nullptr when the repo is in no level.
  const Entry* Find(std::string_view repo) const;
  // Every entry, highest level first, then by name.
  const std::vector<Entry>& entries() const { return entries_; }
  size_t Count(Level level) const;

 private:
  std::vector<Entry> entries_;
  std::map<std::string, size_t> by_lower_name_;
};

// An allowlist file reloaded on change without a restart. A new file that
// does not parse is refused with a log line and a counter; the last good
// one stays in force. Thread-safe.
class AllowlistFile {
 public:
  // Fails when the file cannot be loaded at start: a service must not run
  // without one.
  static absl::StatusOr<std::unique_ptr<AllowlistFile>> Open(std::string path, prometheus::Registry* metrics);

  std::shared_ptr<const Allowlist> Current() const;
  // Reads the file again if its content changed (call it periodically).
  // OK when unchanged or reloaded; the parse error when refused.
  absl::Status Refresh();

 private:
  AllowlistFile(std::string path, prometheus::Registry* metrics);
  void Publish(std::shared_ptr<const Allowlist> list);

  std::string path_;
  prometheus::Family<prometheus::Counter>& reloads_;
  prometheus::Family<prometheus::Gauge>& repos_;
  mutable std::mutex mu_;
  std::shared_ptr<const Allowlist> current_;
  std::string content_;  // of the file as last read, good or refused
};

}  // namespace relay::allowlist
