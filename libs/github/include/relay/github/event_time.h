// The order of two GitHub events about the same thing (a PR's labels), as
// dispatch (which publishes relay.pr_labels) and the collector (which
// keeps them) both apply it: the newest by the event's own time wins,
// never the one read last. A replay, a redelivery or a dead letter sent
// back carries an old event, and must not replace what a newer one said.
#pragma once

#include <compare>
#include <cstdint>

namespace relay::github {

struct EventTime {
  // GitHub's time of the change (a payload's updated_at, to the second).
  int64_t event_at_unix_ms = 0;
  // When intake received the delivery: orders two events of one second
  // (GitHub sends them in order; a redelivery of the older one, received
  // later, ties on the second and wins only then).
  int64_t received_at_unix_ms = 0;

  auto operator<=>(const EventTime&) const = default;
};

}  // namespace relay::github
