// relay-dispatch's own metrics (the scheduler, the budget, the reconciler
// and the consumer register theirs), registered once at start, with every
// label value known up front so each series shows 0 before it counts.
// Internal to the service.
#pragma once

#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace relay::dispatch {

struct DispatchMetrics {
  explicit DispatchMetrics(prometheus::Registry& registry);

  prometheus::Family<prometheus::Counter>& events;
  prometheus::Family<prometheus::Counter>& dispatches;
  prometheus::Family<prometheus::Counter>& writes;
  prometheus::Family<prometheus::Counter>& dead_letters;
  prometheus::Counter& requests_refused;
  prometheus::Counter& revoked_in_doubt;
  prometheus::Counter& uncertain;
  prometheus::Counter& repeats;
  prometheus::Counter& skipped;
  prometheus::Family<prometheus::Counter>& not_fresh;
  prometheus::Family<prometheus::Counter>& filtered;
  prometheus::Family<prometheus::Counter>& label_facts;
  prometheus::Gauge& budget_gauge;
  prometheus::Family<prometheus::Gauge>& rate_remaining;
};

}  // namespace relay::dispatch
