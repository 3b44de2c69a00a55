// relay-dispatch as a service of the host (libs/service): consumes
// github.webhooks and github.requests, plans the GitHub writes, runs them
// through the one budget, and publishes what happened (relay.dispatches,
// github.outcomes, relay.pr_labels, dispatch.ledger, github.requests.dlq).
#pragma once

#include <chrono>
#include <string>

#include "absl/status/statusor.h"
#include "relay/base/config.h"
#include "relay/dispatch/budget.h"
#include "relay/dispatch/shared_budget.h"
#include "relay/dispatch/planner.h"
#include "relay/dispatch/redeliveries.h"
#include "relay/dispatch/scheduler.h"
#include "relay/kafka/producer.h"
#include "relay/service/service.h"

namespace relay::dispatch {

struct Topics {
  std::string webhooks = "github.webhooks";
  std::string requests = "github.requests";
  std::string dispatches = "relay.dispatches";
  std::string outcomes = "github.outcomes";
  std::string labels = "relay.pr_labels";
  std::string ledger = "dispatch.ledger";
  std::string budget = "dispatch.budget";  // the GitHub budget every instance shares
  std::string failed = "github.requests.dlq";  // writes that failed for good
};

struct DispatchSettings {
  kafka::ProducerOptions kafka;
  std::string group_id = "relay-dispatch";
  // How long a member may go silent before its partitions move to another
  // (librdkafka session.timeout.ms): the takeover time after a crash.
  std::chrono::milliseconds session_timeout{45'000};
  Topics topics;
  std::string api_url = "https://api.github.com";
  std::string app_id;
  std::string private_key_file;
  std::string ca_file;
  std::chrono::milliseconds request_timeout{30'000};
  BudgetOptions budget;
  // A granted GitHub call not made within this is given back to the shared
  // budget (shared_budget.h).
  std::chrono::milliseconds budget_lease{2000};
  SchedulerOptions scheduler;
  std::string allowlist_file;
  std::chrono::milliseconds allowlist_reload{10'000};
  std::string token_keys_file;
  PlannerOptions planner;
  size_t batch_records = 500;
  // How long input records are gathered into one batch after the first
  // arrives. Writes are ordered by priority among the batch's writes (and
  // those still queued), so a longer linger keeps priorities under a
  // backlog that arrives in pieces, at the cost of that much latency.
  std::chrono::milliseconds batch_linger{5};
  // How long a batch waits for its writes before the consumer retries it
  // later (writes in progress go on; the retry joins them).
  std::chrono::milliseconds batch_wait{5'000};
  // The group's rebalance timeout (librdkafka max.poll.interval.ms): a
  // member that does not poll for this long is dropped from the group.
  std::chrono::milliseconds max_poll_interval{300'000};
  // On revoke, how long started writes of the revoked partitions may take
  // to finish before the partitions go (the rebalance waits for it; at most
  // a tenth of max_poll_interval). A write still running then stays STARTED
  // in the ledger: its next owner makes it again, marked `repeated`.
  std::chrono::milliseconds revoke_wait{10'000};
  // The GitHub redelivery reconciler (redeliveries.h).
  RedeliveryOptions redeliveries;
};

absl::StatusOr<DispatchSettings> LoadSettings(Config& config, const service::CommonSettings& common);

// relay-dispatch for service::Main and service::Host.
service::Definition Definition();

}  // namespace relay::dispatch
