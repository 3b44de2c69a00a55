// librdkafka error codes classified once, for every client in relay.
#pragma once

#include <librdkafka/rdkafka.h>

#include "absl/status/status.h"

namespace relay::kafka {

enum class ErrorClass {
  kOk,
  kRetriable,   // the same operation may succeed later (broker down, timeout, queue full)
  kFatal,       // the client instance is unusable; recreate it
  kPermanent,   // this record can never succeed (too large, bad topic, auth)
};

ErrorClass Classify(rd_kafka_resp_err_t err);

// A Status for an error: kRetriable -> Unavailable, kFatal -> Aborted,
// kPermanent -> InvalidArgument/PermissionDenied/NotFound.
absl::Status ToStatus(rd_kafka_resp_err_t err, const char* context);

// Installs a log callback on `conf` that writes librdkafka's own log lines
// through relay::log (JSON), instead of librdkafka's stderr format.
void RouteLogs(rd_kafka_conf_t* conf);

}  // namespace relay::kafka
