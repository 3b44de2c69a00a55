#include "relay/collector/test_reports.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include <openssl/evp.h>

#include <boost/json.hpp>

#include "relay/base/digest.h"
#include "relay/base/log.h"
#include "relay/base/status.h"
#include "relay/collector/callback.h"
#include "relay/collector/junit.h"
#include "relay/github/check_runs.h"
#include "relay/github/webhook_signature.h"
#include "relay/v1/collector.pb.h"

namespace relay::collector {
namespace {

// JSON reports are parsed whole (junit.h): they are capped lower than XML.
// (A Boost.JSON tree takes several times its text: 16 MiB of JSON is
// already ~100 MiB in memory.)
constexpr int64_t kMaxJsonReportBytes = 16LL << 20;
constexpr size_t kMaxBatchBytes = 768 * 1024;

// An unlinked file in $TMPDIR (or /tmp): gone when closed, whatever happens.
FILE* NewSpool() {
  const char* dir = std::getenv("TMPDIR");
  int fd = ::open(dir && *dir ? dir : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) return nullptr;
  FILE* f = ::fdopen(fd, "w+b");
  if (!f) ::close(fd);
  return f;
}

std::string HexDigest(const unsigned char* d, size_t n) {
  return Hex(std::string_view(reinterpret_cast<const char*>(d), n));
}

}  // namespace

class ReportUploads::Upload final : public http::BodyStream, public std::enable_shared_from_this<Upload> {
 public:
  Upload(ReportUploads* owner, ReportTarget target, FILE* spool)
      : owner_(owner), shared_(owner->shared_), settings_(owner->settings_), target_(std::move(target)),
        spool_(spool), started_(std::chrono::steady_clock::now()) {
    v1::CallbackRequest id;
    id.set_delivery_id(target_.delivery_id);
    id.set_repo(target_.repo);
    id.mutable_workflow()->set_run_id(target_.run_id);
    id.mutable_workflow()->set_run_attempt(target_.run_attempt);
    id.mutable_workflow()->set_job_name(target_.job_name);
    job_id_ = JobId(id);
    EVP_DigestInit_ex(sha_.get(), Sha256Md(), nullptr);
    auto sink = [this](TestCase&& tc) { return Add(std::move(tc)); };
    parser_ = target_.json ? NewJsonReportParser({}, sink) : NewJUnitParser({}, sink);
    if (target_.gzip) {
      zs_ = {};
      gzip_ok_ = inflateInit2(&zs_, 16 + MAX_WBITS) == Z_OK;  // 16: gzip framing
    }
  }
  // May run after the owner is gone (a session still held an upload that
  // never ended): touches only what it owns and the shared counters.
  ~Upload() override {
    if (target_.gzip && gzip_ok_) inflateEnd(&zs_);
    if (spool_) std::fclose(spool_);
    std::lock_guard lock(shared_->mu);
    --shared_->active;
    shared_->cv.notify_all();
  }

  absl::Status OnData(std::string_view data) override {
    if (std::chrono::steady_clock::now() - started_ > settings_.upload_timeout) {
      // A client trickling a byte now and then must not hold an upload slot.
      return absl::DeadlineExceededError("the upload took longer than " +
                                         std::to_string(settings_.upload_timeout.count() / 1000) + " s");
    }
    if (!target_.gzip) return Parse(data);
    if (!gzip_ok_) return absl::InternalError("gzip: cannot initialise zlib");
    if (gzip_ended_) return absl::InvalidArgumentError("gzip: data after the end of the compressed report");
    zs_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
    zs_.avail_in = static_cast<uInt>(data.size());
    char out[64 * 1024];
    while (zs_.avail_in > 0 && !gzip_ended_) {
      zs_.next_out = reinterpret_cast<Bytef*>(out);
      zs_.avail_out = sizeof out;
      int rc = inflate(&zs_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) gzip_ended_ = true;
      else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        return absl::InvalidArgumentError(std::string("gzip: ") + (zs_.msg ? zs_.msg : "corrupt data"));
      }
      RELAY_RETURN_IF_ERROR(Parse(std::string_view(out, sizeof out - zs_.avail_out)));
      if (rc == Z_BUF_ERROR) break;
    }
    return absl::OkStatus();
  }

  // The rest of the work (a JSON report's whole parse, the spool, Kafka)
  // is not for the I/O thread: the upload's own thread does it, while the
  // owner exists (it waits for producing uploads; once it is closing, an
  // upload that ends is answered 503).
  void OnEnd(http::Responder responder) override {
    {
      std::lock_guard lock(shared_->mu);
      if (shared_->closed) {
        auto r = http::MakeResponse(503, R"({"error":"the collector is shutting down; upload again"})");
        r.set(boost::beast::http::field::retry_after, "5");
        responder.Send(std::move(r));
        return;
      }
      ++shared_->producing;
    }
    std::thread([self = shared_from_this(), responder = std::move(responder)]() mutable {
      self->Finish(std::move(responder));
      std::lock_guard lock(self->shared_->mu);
      --self->shared_->producing;
      self->shared_->cv.notify_all();
    }).detach();
  }

  void Finish(http::Responder responder) {
    absl::Status st = target_.gzip && !gzip_ended_ ? absl::InvalidArgumentError("gzip: the report ends early")
                                                   : parser_->Finish();
    // The last partial batch; an empty report still makes one (empty)
    // batch, so the upload is on record.
    if (st.ok() && (batch_.cases_size() > 0 || batches_ == 0)) st = WriteBatch(/*force=*/true);
    if (st.ok() && (std::fflush(spool_) != 0 || std::fseek(spool_, 0, SEEK_SET) != 0)) {
      st = absl::InternalError("test report spool: cannot write");
    }
    if (!st.ok()) {
      owner_->reports_.Add({{"outcome", "refused"}}).Increment();
      log::Info("test report refused", {{"repo", target_.repo}, {"reason", std::string(st.message())}});
      responder.Send(http::MakeResponse(http::StatusToHttp(st), ErrorBody(st)));
      return;
    }
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int digest_len = 0;
    EVP_DigestFinal_ex(sha_.get(), digest, &digest_len);
    upload_id_ = github::RequestId({"test_report", job_id_, HexDigest(digest, digest_len)});
    ProduceAll(std::move(responder));
  }

  // Reads the spool back and produces it, a window of batches at a time.
  // On the upload's own thread.
  void ProduceAll(http::Responder responder) {
    struct Window {
      std::mutex mu;
      std::condition_variable cv;
      size_t in_flight = 0;
      absl::Status first = absl::OkStatus();
    };
    auto window = std::make_shared<Window>();
    const ReportSettings& s = settings_;
    int64_t now = owner_->clock_->UnixMillis();
    // A time the same report uploaded again gets again, so its rows land on
    // the same day whenever the retry comes.
    int64_t report_time = target_.dispatched_at_unix_ms;
    int64_t own = parser_ ? parser_->timestamp_unix_ms() : 0;
    if (report_time <= 0 && own >= now - 30LL * 86'400'000 && own <= now + 86'400'000) report_time = own;
    if (report_time <= 0) report_time = now;
    absl::Status st;
    for (int32_t seq = 0; seq < batches_ && st.ok(); ++seq) {
      v1::TestReportBatch batch;
      uint32_t len = 0;
      std::string bytes;
      if (std::fread(&len, sizeof len, 1, spool_) != 1) {
        st = absl::InternalError("test report spool: short read");
        break;
      }
      bytes.resize(len);
      if (len > 0 && std::fread(bytes.data(), 1, len, spool_) != len) {
        st = absl::InternalError("test report spool: short read");
        break;
      }
      batch.ParseFromString(bytes);
      batch.set_upload_id(upload_id_);
      batch.set_job_id(job_id_);
      batch.set_repo(target_.repo);
      batch.set_delivery_id(target_.delivery_id);
      batch.set_run_id(target_.run_id);
      batch.set_run_attempt(target_.run_attempt);
      batch.set_job_name(target_.job_name);
      batch.set_uploaded_at_unix_ms(now);
      batch.set_report_time_unix_ms(report_time);
      batch.set_seq(seq);
      batch.set_last(seq + 1 == batches_);
      batch.set_total_cases(cases_);
      batch.set_batches(batches_);
      {
        std::unique_lock lock(window->mu);
        window->cv.wait(lock, [&] { return window->in_flight < s.batches_in_flight; });
        if (!window->first.ok()) break;
        ++window->in_flight;
      }
      owner_->producer_->Send(
          kafka::MessageRecord(s.topic, job_id_, batch, target_.delivery_id),
          [window](absl::Status result) {
            std::lock_guard lock(window->mu);
            if (!result.ok() && window->first.ok()) window->first = result;
            --window->in_flight;
            window->cv.notify_all();
          });
    }
    {
      std::unique_lock lock(window->mu);
      window->cv.wait(lock, [&] { return window->in_flight == 0; });
      if (st.ok()) st = window->first;
    }
    if (!st.ok()) {
      owner_->reports_.Add({{"outcome", "unavailable"}}).Increment();
      log::Warn("test report not durable", {{"repo", target_.repo}, {"error", std::string(st.message())}});
      auto r = http::MakeResponse(503, R"j({"error":"the report could not be made durable; upload it again (the same report makes the same records)"})j");
      r.set(boost::beast::http::field::retry_after, "5");
      responder.Send(std::move(r));
      return;
    }
    owner_->reports_.Add({{"outcome", "accepted"}}).Increment();
    owner_->cases_.Increment(static_cast<double>(cases_));
    responder.Send(http::MakeResponse(
        202, "{\"status\":\"accepted\",\"upload_id\":\"" + upload_id_ + "\",\"job_id\":\"" + job_id_ +
                 "\",\"test_cases\":" + std::to_string(cases_) + ",\"batches\":" + std::to_string(batches_) + "}"));
  }

 private:
  static std::string ErrorBody(const absl::Status& st) {
    return boost::json::serialize(boost::json::object{{"error", std::string(st.message())}});
  }

  // The upload's id digests these bytes, the report as decompressed: a
  // client that compresses again for a retry (gzip headers carry a time)
  // still sends the same report, and its rows land once.
  absl::Status Parse(std::string_view data) {
    EVP_DigestUpdate(sha_.get(), data.data(), data.size());
    parsed_bytes_ += static_cast<int64_t>(data.size());
    int64_t cap = target_.json ? std::min(kMaxJsonReportBytes, settings_.max_report_bytes) : settings_.max_report_bytes;
    if (parsed_bytes_ > cap) {
      return absl::ResourceExhaustedError("the report is larger than " + std::to_string(cap) + " bytes" +
                                          (target_.gzip ? " decompressed" : ""));
    }
    return parser_->Feed(data);
  }

  absl::Status Add(TestCase&& tc) {
    v1::TestCaseResult* c = batch_.add_cases();
    c->set_file(std::move(tc.file));
    c->set_classname(std::move(tc.classname));
    c->set_name(std::move(tc.name));
    c->set_duration_s(tc.duration_s);
    c->set_outcome(std::string(OutcomeName(tc.outcome)));
    c->set_reruns(tc.reruns);
    c->set_message(std::move(tc.message));
    batch_bytes_ += c->file().size() + c->classname().size() + c->name().size() + c->outcome().size() +
                    c->message().size() + 24;
    ++cases_;
    return WriteBatch(false);
  }

  // Spools the batch being filled when it is full (or `force`).
  absl::Status WriteBatch(bool force) {
    // Full by count, or by size: a record stays under the broker's default
    // message.max.bytes (1 MiB) whatever the messages hold.
    if (!force && static_cast<size_t>(batch_.cases_size()) < settings_.batch_cases &&
        batch_bytes_ < kMaxBatchBytes) {
      return absl::OkStatus();
    }
    std::string bytes = batch_.SerializeAsString();
    uint32_t len = static_cast<uint32_t>(bytes.size());
    if (std::fwrite(&len, sizeof len, 1, spool_) != 1 || std::fwrite(bytes.data(), 1, len, spool_) != len) {
      return absl::InternalError("test report spool: cannot write (disk full?)");
    }
    batch_.Clear();
    batch_bytes_ = 0;
    ++batches_;
    return absl::OkStatus();
  }

 private:
  ReportUploads* owner_;  // only while producing (the owner waits for that)
  std::shared_ptr<Shared> shared_;
  const ReportSettings settings_;
  ReportTarget target_;
  FILE* spool_;
  std::string job_id_, upload_id_;
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> sha_{EVP_MD_CTX_new(), &EVP_MD_CTX_free};
  z_stream zs_{};
  bool gzip_ok_ = false, gzip_ended_ = false;
  std::unique_ptr<ReportParser> parser_;
  v1::TestReportBatch batch_;
  int32_t batches_ = 0;
  int64_t cases_ = 0;
  int64_t parsed_bytes_ = 0;
  size_t batch_bytes_ = 0;  // approximate serialized size of batch_
  std::chrono::steady_clock::time_point started_;
};

ReportUploads::ReportUploads(ReportSettings settings, kafka::Producer* producer, const Clock* clock,
                             prometheus::Registry* metrics)
    : settings_(std::move(settings)),
      producer_(producer),
      clock_(clock),
      reports_(prometheus::BuildCounter()
                   .Name("relay_collector_test_reports_total")
                   .Help("Test-report uploads by outcome (accepted, refused, unavailable, busy)")
                   .Register(*metrics)),
      cases_(prometheus::BuildCounter()
                 .Name("relay_collector_test_cases_total")
                 .Help("Test cases of accepted reports, produced to ci.test_reports")
                 .Register(*metrics)
                 .Add({})) {
  for (const char* o : {"accepted", "refused", "unavailable", "busy"}) reports_.Add({{"outcome", o}});
}

ReportUploads::~ReportUploads() {
  std::unique_lock lock(shared_->mu);
  shared_->closed = true;
  shared_->cv.wait(lock, [this] { return shared_->producing == 0; });
}

absl::StatusOr<std::shared_ptr<http::BodyStream>> ReportUploads::Begin(ReportTarget target) {
  {
    std::lock_guard lock(shared_->mu);
    if (shared_->closed || shared_->active >= settings_.max_uploads) {
      reports_.Add({{"outcome", "busy"}}).Increment();
      return absl::UnavailableError("too many test reports being uploaded; retry");
    }
    ++shared_->active;
  }
  FILE* spool = NewSpool();
  if (!spool) {
    std::lock_guard lock(shared_->mu);
    --shared_->active;
    return absl::InternalError("test report spool: cannot create a temporary file");
  }
  return std::shared_ptr<http::BodyStream>(std::make_shared<Upload>(this, std::move(target), spool));
}

}  // namespace relay::collector
