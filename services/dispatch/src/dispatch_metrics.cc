#include "dispatch_metrics.h"

namespace relay::dispatch {

DispatchMetrics::DispatchMetrics(prometheus::Registry& registry)
    : events(prometheus::BuildCounter()
                 .Name("relay_dispatch_events_total")
                 .Help("Upstream webhook records by event and outcome (relayed, ignored, poison)")
                 .Register(registry)),
      dispatches(prometheus::BuildCounter()
                     .Name("relay_dispatch_dispatches_total")
                     .Help("repository_dispatch events GitHub accepted, by downstream level")
                     .Register(registry)),
      writes(prometheus::BuildCounter()
                 .Name("relay_github_writes_total")
                 .Help("GitHub writes finished, by kind and result (done, no_op, dead_lettered)")
                 .Register(registry)),
      dead_letters(prometheus::BuildCounter()
                       .Name("relay_github_dead_letters_total")
                       .Help("GitHub writes sent to github.requests.dlq, by reason: app_not_installed (the "
                             "installation lookup answered 404) apart from every other permanent failure")
                       .Register(registry)),
      requests_refused(prometheus::BuildCounter()
                           .Name("relay_dispatch_requests_refused_total")
                           .Help("github.requests records refused (undecodable, a target or value relay never "
                                 "asks for); each goes to github.requests.dlq with the reason")
                           .Register(registry)
                           .Add({})),
      revoked_in_doubt(prometheus::BuildCounter()
                           .Name("relay_dispatch_revoked_in_doubt_total")
                           .Help("Started writes still running when their partition moved to another member "
                                 "(dispatch.revoke_wait): the next owner makes them again, marked repeated")
                           .Register(registry)
                           .Add({})),
      uncertain(prometheus::BuildCounter()
                    .Name("relay_github_uncertain_retries_total")
                    .Help("Writes retried after an attempt that may have reached GitHub (timeout or reset after "
                          "sending, 502/504): GitHub may have taken them twice")
                    .Register(registry)
                    .Add({})),
      repeats(prometheus::BuildCounter()
                  .Name("relay_dispatch_repeats_total")
                  .Help("Writes made again after a restart because they were in flight at a crash")
                  .Register(registry)
                  .Add({})),
      skipped(prometheus::BuildCounter()
                  .Name("relay_dispatch_replays_skipped_total")
                  .Help("Writes asked for again (replay, restart, retry) that the ledger shows done")
                  .Register(registry)
                  .Add({})),
      not_fresh(prometheus::BuildCounter()
                    .Name("relay_dispatch_writes_skipped_total")
                    .Help("GitHub writes a webhook record asked for and did not get, by reason: replayed (a "
                          "relayctl replay's copy), read_again (below the offset its partition was handled "
                          "through: a group moved back), stale (older than the ledger remembers)")
                    .Register(registry)),
      filtered(prometheus::BuildCounter()
                   .Name("relay_dispatch_writes_filtered_total")
                   .Help("Dispatches not made because the downstream repository's subscription (allowlist) "
                         "does not ask for them, by reason: event (not this event or action), label (the PR "
                         "carries none of its labels)")
                   .Register(registry)),
      label_facts(prometheus::BuildCounter()
                      .Name("relay_dispatch_label_facts_total")
                      .Help("relay.pr_labels facts of webhook records, by result: published, older (not newer "
                            "by event time than the PR's last fact), or not published because the record was "
                            "replayed, read_again or stale")
                      .Register(registry)),
      budget_gauge(prometheus::BuildGauge()
                       .Name("relay_github_budget_writes_left")
                       .Help("Content-creating writes left in the current budget window")
                       .Register(registry)
                       .Add({})),
      rate_remaining(prometheus::BuildGauge()
                         .Name("relay_github_rate_limit_remaining")
                         .Help("X-RateLimit-Remaining last seen, by installation")
                         .Register(registry)) {
  for (const char* l : {"L1", "L2", "L3", "L4"}) dispatches.Add({{"level", l}});
  for (const char* r : {"app_not_installed", "failed"}) dead_letters.Add({{"reason", r}});
  for (const char* r : {"replayed", "read_again", "stale"}) {
    not_fresh.Add({{"reason", r}});
    label_facts.Add({{"result", r}});
  }
  for (const char* r : {"published", "older"}) label_facts.Add({{"result", r}});
}

}  // namespace relay::dispatch
