// Test-report uploads: a JUnit XML (or JSON) report streamed in over HTTP,
// parsed as it arrives (junit.h), its test cases spooled in batches to an
// unlinked temporary file, and produced to ci.test_reports only once the
// whole report parsed (a malformed report leaves no partial records). The
// caller is answered once every batch is durable. Memory per upload is a
// batch or two and a window of batches in flight, whatever the report's
// size; the spool is on disk.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "relay/base/clock.h"
#include "relay/http/server.h"
#include "relay/kafka/producer.h"

namespace relay::collector {

struct ReportSettings {
  std::string topic = "ci.test_reports";
  int64_t max_report_bytes = 512LL << 20;  // as uploaded, and decompressed
  size_t batch_cases = 2000;               // test cases per record
  size_t batches_in_flight = 8;            // records awaiting their ack, per upload
  int max_uploads = 4;                     // at once; more get 503 + Retry-After
  // An upload taking longer gets 408 (a client trickling bytes must not
  // hold a slot; the body timeout alone restarts with every read).
  std::chrono::milliseconds upload_timeout{10 * 60 * 1000};
};

// Which job a report belongs to, established by the caller (OIDC identity,
// allowlist, relay token) before the body is read.
struct ReportTarget {
  std::string repo;
  std::string delivery_id;
  std::string run_id;
  std::string run_attempt;
  std::string job_name;
  bool json = false;  // else JUnit XML
  bool gzip = false;  // Content-Encoding: gzip
  // The dispatch's time (its relay token's issue time), 0 without a token:
  // the report's rows are placed on its day (TestReportBatch).
  int64_t dispatched_at_unix_ms = 0;
};

class ReportUploads {
 public:
  ReportUploads(ReportSettings settings, kafka::Producer* producer, const Clock* clock, prometheus::Registry* metrics);
  // Waits for uploads being produced (their callers are answered). Uploads
  // still being received outlive it safely and are answered 503 when they end.
  ~ReportUploads();

  // A stream taking one upload's body, or Unavailable when max_uploads are
  // in progress (Retry-After), or Internal when no spool file can be made.
  absl::StatusOr<std::shared_ptr<http::BodyStream>> Begin(ReportTarget target);

 private:
  class Upload;
  friend class Upload;
  // What uploads share with their owner, and keep when it is gone.
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    bool closed = false;  // the owner is being destroyed
    int active = 0;       // uploads begun and not yet released
    int producing = 0;    // uploads past their body, being parsed out and produced
  };

  ReportSettings settings_;
  kafka::Producer* producer_;
  const Clock* clock_;
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  prometheus::Family<prometheus::Counter>& reports_;
  prometheus::Counter& cases_;
};

}  // namespace relay::collector
