#include "relay/clickhouse/client.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <thread>

#include <boost/url.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "relay/base/log.h"

namespace relay::clickhouse {
namespace {

namespace bhttp = boost::beast::http;

constexpr char kCodePayload[] = "relay.clickhouse/code";

std::string Encode(std::string_view v) { return boost::urls::encode(v, boost::urls::unreserved_chars); }

// ClickHouse error codes whose repeat may succeed (the server was busy or
// going away), as the official clients treat them.
bool Retryable(int code) {
  switch (code) {
    case 159:  // TIMEOUT_EXCEEDED
    case 202:  // TOO_MANY_SIMULTANEOUS_QUERIES
    case 203:  // NO_FREE_CONNECTION
    case 209:  // SOCKET_TIMEOUT
    case 210:  // NETWORK_ERROR
    case 252:  // TOO_MANY_PARTS
    case 394:  // QUERY_WAS_CANCELLED
      return true;
    default:
      return false;
  }
}

}  // namespace

std::optional<int> ServerErrorCode(const absl::Status& status) {
  auto payload = status.GetPayload(kCodePayload);
  if (!payload) return std::nullopt;
  return std::atoi(std::string(*payload).c_str());
}

absl::Status DecodeError(unsigned http_status, std::string_view body) {
  int code = 0;
  if (auto at = body.find("Code: "); at != std::string_view::npos) code = std::atoi(std::string(body.substr(at + 6, 8)).c_str());
  std::string message(body.substr(0, std::min<size_t>(body.size(), 1024)));
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  if (message.empty()) message = "HTTP " + std::to_string(http_status);
  message = "clickhouse: " + message;
  absl::Status st;
  switch (code) {
    case 62:   // SYNTAX_ERROR
    case 16:   // NO_SUCH_COLUMN_IN_TABLE
    case 27:   // CANNOT_PARSE_INPUT_ASSERTION_FAILED
    case 33:   // CANNOT_READ_ALL_DATA (a RowBinary body shorter than its rows)
    case 47:   // UNKNOWN_IDENTIFIER
    case 53:   // TYPE_MISMATCH
    case 43:   // ILLEGAL_TYPE_OF_ARGUMENT
      st = absl::InvalidArgumentError(message);
      break;
    case 60:   // UNKNOWN_TABLE
    case 81:   // UNKNOWN_DATABASE
      st = absl::NotFoundError(message);
      break;
    case 241:  // MEMORY_LIMIT_EXCEEDED
    case 158:  // TOO_MANY_ROWS (max_rows_to_read)
    case 307:  // TOO_MANY_BYTES (max_bytes_to_read)
      st = absl::ResourceExhaustedError(message);
      break;
    case 159:  // TIMEOUT_EXCEEDED
      st = absl::DeadlineExceededError(message);
      break;
    case 516:  // AUTHENTICATION_FAILED (current releases; 18.x says 192/193)
    case 192:  // UNKNOWN_USER
    case 193:  // WRONG_PASSWORD
    case 164:  // READONLY: a write (or a setting) a read-only user may not make
    case 291:  // DATABASE_ACCESS_DENIED (18.x: allow_databases)
    case 497:  // ACCESS_DENIED (current releases: no grant)
      st = absl::PermissionDeniedError(message);
      break;
    default:
      st = Retryable(code) || http_status == 503 || (code == 0 && http_status >= 500)
               ? absl::UnavailableError(message)
               : absl::InternalError(message);
  }
  if (code != 0) st.SetPayload(kCodePayload, absl::Cord(std::to_string(code)));
  return st;
}

std::string Quote(std::string_view value) {
  std::string out = "'";
  for (unsigned char c : value) {
    if (c == '\'' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "'";
}

std::string QuoteIdentifier(std::string_view name) {
  std::string out = "`";
  for (char c : name) {
    if (c == '`' || c == '\\') out += '\\';
    out += c;
  }
  return out + "`";
}

Client::Client(ClientOptions options, std::unique_ptr<http::Client> http)
    : options_(std::move(options)), http_(std::move(http)) {
  auth_ = "Basic " + absl::Base64Escape(options_.user + ":" + options_.password);
}

absl::StatusOr<std::unique_ptr<Client>> Client::New(ClientOptions options) {
  if (options.max_attempts < 1) return absl::InvalidArgumentError("clickhouse: max_attempts must be >= 1");
  for (const auto& [name, value] : options.settings) {
    bool ok = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
      return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
    });
    if (!ok) return absl::InvalidArgumentError("clickhouse: '" + name + "' is not a setting name");
  }
  http::ClientOptions ho;
  ho.connect_timeout = options.connect_timeout;
  ho.request_timeout = options.timeout;
  ho.user_agent = "relay-clickhouse";
  ho.max_response_bytes = options.max_response_bytes;
  auto http = http::Client::New(options.url, ho);
  if (!http.ok()) return absl::InvalidArgumentError("clickhouse url: " + std::string(http.status().message()));
  return std::unique_ptr<Client>(new Client(std::move(options), std::move(*http)));
}

void Client::Bound(QueryBounds bounds) { bounds_ = std::move(bounds); }

absl::StatusOr<std::string> Client::Send(const std::string& query, std::string_view body, bool idempotent) {
  using std::chrono::milliseconds;
  // With `query` (an INSERT), the body is its data; without, the body is
  // the statement.
  std::string target = "/?database=" + Encode(options_.database);
  for (const auto& [name, value] : options_.settings) target += "&" + name + "=" + Encode(value);
  if (!query.empty()) target += "&query=" + Encode(query);
  std::string query_id;
  if (!bounds_.query_id_prefix.empty()) {
    query_id = bounds_.query_id_prefix + "-" + std::to_string(++queries_);
    target += "&query_id=" + Encode(query_id);
  }
  std::map<std::string, std::string> headers = {{"Authorization", auth_}};
  auto backoff = options_.retry_backoff;
  absl::Status last;
  for (int attempt = 1; attempt <= options_.max_attempts; ++attempt) {
    milliseconds timeout = options_.timeout;
    if (bounds_.deadline) {
      timeout = std::min(timeout, std::chrono::duration_cast<milliseconds>(*bounds_.deadline -
                                                                           std::chrono::steady_clock::now()));
      if (timeout <= milliseconds(0)) {
        return attempt == 1 ? absl::DeadlineExceededError("clickhouse: the request's deadline passed before it was sent")
                            : last;
      }
    }
    // The server stops on its own a query nobody waits for any more; it
    // checks between blocks, so it may overrun by one: the client's own
    // deadline, connecting included (and the kill below), is the bound.
    http_->SetDeadline(bounds_.deadline);
    std::string sent = target + "&max_execution_time=" + std::to_string(std::max<int64_t>(1, timeout.count() / 1000));
    auto r = http_->Send(bhttp::verb::post, sent, headers, body);  // sent from `body`, not copied
    if (r.ok() && r->status == 200) return std::move(r->body);
    bool may_repeat;
    if (!r.ok()) {
      // The HTTP client says "after sending" when the request may have
      // reached the server: only then could a repeat double its effect,
      // and only then may the query still be running there.
      bool after_sending = r.status().message().find("after sending") != std::string_view::npos;
      if (after_sending && !query_id.empty()) Kill(query_id);
      if (bounds_.deadline && std::chrono::steady_clock::now() >= *bounds_.deadline) {
        return absl::DeadlineExceededError("clickhouse: no answer within the request's deadline (" +
                                           std::to_string(timeout.count()) + " ms)" +
                                           (query_id.empty() ? "" : "; query " + query_id + " killed"));
      }
      last = absl::UnavailableError("clickhouse: " + std::string(r.status().message()));
      may_repeat = idempotent || !after_sending;
    } else {
      last = DecodeError(r->status, r->body);
      may_repeat = idempotent && absl::IsUnavailable(last);
    }
    if (!may_repeat || attempt == options_.max_attempts) break;
    log::Warn("clickhouse request failed; retrying", {{"attempt", attempt}, {"error", std::string(last.message())}});
    std::this_thread::sleep_for(backoff);
    backoff *= 2;
  }
  return last;
}

void Client::Kill(const std::string& query_id) {
  // SYNC: the query is gone when this returns (a kill takes effect
  // between blocks). Never past kKillTimeout: the server's own
  // max_execution_time ends a query this cannot reach.
  http_->SetDeadline(std::chrono::steady_clock::now() + kKillTimeout);
  std::string sql = "KILL QUERY WHERE query_id = " + Quote(query_id) + " SYNC";
  auto r = http_->Send(bhttp::verb::post, "/?database=" + Encode(options_.database), {{"Authorization", auth_}}, sql);
  if (!r.ok() || r->status != 200) {
    log::Warn("clickhouse: a query given up on could not be killed; the server's max_execution_time ends it",
              {{"query_id", query_id},
               {"error", r.ok() ? DecodeError(r->status, r->body).ToString() : std::string(r.status().message())}});
  }
}

absl::StatusOr<std::string> Client::Query(std::string_view sql, bool idempotent) {
  // The statement is the body (no URL length limit).
  return Send("", sql, idempotent);
}

absl::Status Client::Insert(std::string_view table, std::string_view columns, std::string_view format,
                            std::string_view data, bool idempotent) {
  std::string query = "INSERT INTO " + QuoteIdentifier(table);
  if (!columns.empty()) query += " (" + std::string(columns) + ")";
  query += " FORMAT " + std::string(format);
  return Send(query, data, idempotent).status();
}

}  // namespace relay::clickhouse
