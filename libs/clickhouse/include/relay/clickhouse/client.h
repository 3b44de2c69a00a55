// ClickHouse over its HTTP interface (no C++ client is packaged; the
// official Go, JS and Python clients speak HTTP too): statements and
// queries, inserts of a prepared body (RowBinary, see row_binary.h), server
// errors decoded into absl::Status with ClickHouse's error code, and
// retries only where a repeat cannot change the result.
//
// Thread-compatible: one request at a time per Client (it holds one
// keep-alive connection); make one per thread.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "relay/http/client.h"

namespace relay::clickhouse {

struct ClientOptions {
  std::string url = "http://127.0.0.1:8123";  // http(s)://host:port
  std::string user = "default";
  std::string password;  // sent as HTTP basic auth, never in the URL (server logs keep URLs)
  std::string database = "default";
  std::chrono::milliseconds connect_timeout{5'000};
  // Whole request; the server is also told (max_execution_time) so it
  // stops working on a query nobody waits for any more.
  std::chrono::milliseconds timeout{60'000};
  // Attempts for requests that may be repeated (see Query / Insert).
  int max_attempts = 3;
  std::chrono::milliseconds retry_backoff{250};  // doubled per attempt
  uint64_t max_response_bytes = 256ull * 1024 * 1024;
};

class Client {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> New(ClientOptions options);

  // Runs `sql` and returns the response body (the format the SQL names;
  // TabSeparated by default). `idempotent`: the statement may run twice
  // with the same result (SELECT, CREATE ... IF NOT EXISTS), so transport
  // failures and retryable server errors are retried.
  absl::StatusOr<std::string> Query(std::string_view sql, bool idempotent = true);

  // INSERT INTO `table` (`columns`, may be empty: all) FORMAT `format`,
  // with `data` as the body. Retried after a failure only when
  // `idempotent` (the table's design makes a repeated insert harmless, as
  // relay's ReplacingMergeTree tables with deterministic ids do) or when
  // the request provably never reached the server.
  absl::Status Insert(std::string_view table, std::string_view columns, std::string_view format,
                      std::string_view data, bool idempotent);

 private:
  explicit Client(ClientOptions options, std::unique_ptr<http::Client> http);
  absl::StatusOr<std::string> Send(const std::string& query, std::string_view body, bool idempotent);

  ClientOptions options_;
  std::unique_ptr<http::Client> http_;
  std::string auth_;  // "Basic ..."
};

// ClickHouse's error code carried by a Status this library returned
// (e.g. 60 for UNKNOWN_TABLE), if any.
std::optional<int> ServerErrorCode(const absl::Status& status);

// Decodes a ClickHouse error response: HTTP status and body ("Code: 60,
// e.displayText() = DB::Exception: ..." on 18.x, "Code: 60. DB::Exception:
// ... (UNKNOWN_TABLE)" on current releases) into a Status whose code says
// what a caller can do: InvalidArgument (syntax, bad types: fix the
// statement), NotFound (no such table or database), ResourceExhausted
// (memory limit), DeadlineExceeded (timeout), Unavailable (too many parts,
// server shutting down, network: retry later), Internal otherwise.
absl::Status DecodeError(unsigned http_status, std::string_view body);

// A SQL string literal: quotes and backslashes escaped, control bytes as
// \xHH. 18.x has no server-side query parameters ({name:Type} came in
// 19.x), so values are quoted here, and only here.
std::string Quote(std::string_view value);
// An identifier in backquotes (names are relay's own, but quoted anyway).
std::string QuoteIdentifier(std::string_view name);

}  // namespace relay::clickhouse
