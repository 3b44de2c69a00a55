// The ciflow/crcr devices each upstream PR carries, from relay.pr_labels:
// for each PR, the fact of the newest event by the event's own time
// (relay/github/event_time.h), never the one read last. A fact of an older
// event (a replay, a redelivery that came late, a fact published before
// facts carried their time: time 0) never replaces a newer one, so it
// neither rolls the labels back nor raises check runs. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "relay/github/event_time.h"
#include "relay/v1/dispatch.pb.h"

namespace relay::collector {

class LabelTable {
 public:
  // True when `fact` is newer than what the table holds for its PR (or the
  // PR is new to it): its devices are the PR's from now on. False, and
  // nothing changes, for an older fact or the same event again.
  bool Apply(const v1::PullRequestLabels& fact);
  // The PR's devices; empty when it has no fact.
  std::set<std::string> Devices(const std::string& upstream_repo, int64_t pr) const;

 private:
  struct Held {
    github::EventTime at;
    std::set<std::string> devices;
  };
  mutable std::mutex mu_;
  std::unordered_map<std::string, Held> prs_;  // "<upstream, lower case>#<pr>"
};

}  // namespace relay::collector
