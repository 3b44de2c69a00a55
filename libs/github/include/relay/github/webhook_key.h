// The Kafka key of a github.webhooks record: what decides its partition,
// and so which records keep their order (records of one key are in one
// partition, in the order the broker appended them). intake is the only
// producer; the rules are here so they are written down once, with tests.
//
// Two schemes (intake.record_keys; docs/architecture.md, "Topics"):
//   kRepository  the repository's full name for every event (as before): one upstream
//                is one partition (all of its events in order).
//   kOrdered     the smallest unit whose order a consumer needs, so one
//                upstream spreads over every partition:
//                  pull_request*, issues, issue_comment  "<repo>#<number>"
//                      (a PR and its issue share the number: one key; dispatch
//                      needs a PR's events in order: labels, synchronize)
//                  push                          "<repo>@<ref>" (dispatch:
//                      a ref's pushes in order)
//                  workflow_job                  "<repo>/job:<id>" (lifecycle's
//                      pools: a job's queued, in_progress, completed)
//                  workflow_run, check_run, check_suite
//                                                "<repo>/run:<id>", "/check_run:<id>",
//                                                "/check_suite:<id>" (no consumer
//                      needs an order across them; one object's events stay together)
//                  status                        "<repo>@<sha>"
//                  any other event of a repository  "<repo>" (low volume)
//   Either scheme: no repository (an org hook's ping, app events): the
//   delivery id (no order needed, spread). An event whose payload lacks the
//   field its key needs (a PR event without a number) falls back to
//   "<repo>", so it still keeps the repository's order.
// kOrdered lower-cases repository names (GitHub compares them
// case-insensitively); kRepository keeps them as received, as it always has.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace relay::github {

enum class WebhookKeys { kRepository, kOrdered };

// The header intake puts on records keyed by kOrdered ("relay-keys: 2"):
// consumers can tell the two schemes apart record by record.
inline constexpr char kWebhookKeysHeader[] = "relay-keys";
inline constexpr char kOrderedKeysVersion[] = "2";
// With it, the instant (unix ms, decimal) from which intake keys records so:
// every record received since carries ordered keys, none before it does.
inline constexpr char kWebhookKeysFromHeader[] = "relay-keys-from";

// Parses "repository" | "ordered"; false for anything else.
bool ParseWebhookKeys(std::string_view text, WebhookKeys* out);

// The payload's fields a key may need; 0 / empty when absent.
struct WebhookKeyFacts {
  std::string_view event;       // X-GitHub-Event
  std::string_view repository;  // repository.full_name
  int64_t number = 0;           // pull_request.number, issue.number, or the top-level number
  std::string_view ref;         // push: the full ref (refs/heads/main)
  std::string_view sha;         // status: the commit
  int64_t object_id = 0;        // workflow_job.id, workflow_run.id, check_run.id, check_suite.id
};

// The key for `facts` under `scheme`; `delivery_id` when there is no repository.
std::string WebhookKey(WebhookKeys scheme, const WebhookKeyFacts& facts, std::string_view delivery_id);

// Which object's id an event's key uses ("workflow_job" for workflow_job,
// ...), or "" when its key needs none. intake reads `<that>.id`.
std::string_view KeyObjectOf(std::string_view event);

}  // namespace relay::github
