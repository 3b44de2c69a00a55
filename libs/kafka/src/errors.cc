#include "relay/kafka/errors.h"

#include <string>

#include "relay/base/log.h"
#include "relay/kafka/producer.h"

namespace relay::kafka {

ErrorClass Classify(rd_kafka_resp_err_t err) {
  switch (err) {
    case RD_KAFKA_RESP_ERR_NO_ERROR:
      return ErrorClass::kOk;
    case RD_KAFKA_RESP_ERR__FATAL:
    case RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER:
    case RD_KAFKA_RESP_ERR_UNKNOWN_PRODUCER_ID:
    case RD_KAFKA_RESP_ERR_INVALID_PRODUCER_EPOCH:
    case RD_KAFKA_RESP_ERR_PRODUCER_FENCED:
    case RD_KAFKA_RESP_ERR__GAPLESS_GUARANTEE:
    case RD_KAFKA_RESP_ERR__INCONSISTENT:
      return ErrorClass::kFatal;
    case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_RECORD_LIST_TOO_LARGE:
    case RD_KAFKA_RESP_ERR_INVALID_RECORD:
    case RD_KAFKA_RESP_ERR_INVALID_MSG:
    case RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION:
    case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
    case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
    case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
    case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
    case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
    case RD_KAFKA_RESP_ERR__AUTHENTICATION:
    case RD_KAFKA_RESP_ERR__INVALID_ARG:
      return ErrorClass::kPermanent;
    default:
      // Timeouts, transport errors, leader changes, queue full, purges:
      // worth another try later.
      return ErrorClass::kRetriable;
  }
}

absl::Status ToStatus(rd_kafka_resp_err_t err, const char* context) {
  std::string msg = std::string(context) + ": " + rd_kafka_err2name(err) + ": " + rd_kafka_err2str(err);
  switch (Classify(err)) {
    case ErrorClass::kOk:
      return absl::OkStatus();
    case ErrorClass::kRetriable:
      return absl::UnavailableError(msg);
    case ErrorClass::kFatal:
      return absl::AbortedError(msg);
    case ErrorClass::kPermanent:
      if (err == RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED ||
          err == RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED ||
          err == RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED || err == RD_KAFKA_RESP_ERR__AUTHENTICATION) {
        return absl::PermissionDeniedError(msg);
      }
      if (err == RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC || err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART ||
          err == RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION) {
        return absl::NotFoundError(msg);
      }
      return absl::InvalidArgumentError(msg);
  }
  return absl::UnknownError(msg);
}

bool IsPermanentProduceError(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kPermissionDenied:
      return true;
    default:
      return false;
  }
}

void RouteLogs(rd_kafka_conf_t* conf) {
  rd_kafka_conf_set_log_cb(conf, [](const rd_kafka_t* rk, int level, const char* fac, const char* buf) {
    // syslog levels: 0-3 error, 4 warning, 5-6 info, 7 debug.
    log::Level l = level <= 3 ? log::Level::kError
                   : level == 4 ? log::Level::kWarn
                   : level <= 6 ? log::Level::kInfo
                                : log::Level::kDebug;
    if (!log::Enabled(l)) return;
    log::Write(l, "librdkafka", {{"client", rd_kafka_name(rk)}, {"facility", fac}, {"message", buf}});
  });
}

}  // namespace relay::kafka
