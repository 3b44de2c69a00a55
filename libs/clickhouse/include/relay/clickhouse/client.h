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
#include <map>
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
  // ClickHouse settings sent with every request as URL parameters (e.g. a
  // reader's max_rows_to_read, max_memory_usage). Names are letters,
  // digits and '_' (New refuses others). A user whose profile says
  // readonly=1 may change no setting at all, not even these (18.16 answers
  // READONLY, code 164); readonly=2 may.
  std::map<std::string, std::string> settings;
};

// How long a kill of a query given up on may take (QueryBounds).
inline constexpr std::chrono::milliseconds kKillTimeout{3'000};

// What bounds the queries of one unit of work (an HTTP request that reads
// through this client), set with Client::Bound.
struct QueryBounds {
  // Every request of the work ends by then: its HTTP timeout is what is
  // left, the server is told as max_execution_time (whole seconds, at
  // least 1), and none starts after it (DeadlineExceeded).
  std::optional<std::chrono::steady_clock::time_point> deadline;
  // Set: each query is sent with the query_id `<prefix>-<n>`, and a query
  // the client gives up on (its deadline passed, or the connection failed
  // after sending) is killed on the server (KILL QUERY ... SYNC, by that
  // id) before Query returns: 18.16 goes on with a query whose client has
  // gone (cancel_http_readonly_queries_on_client_close came later), and
  // nothing must be left running that nobody waits for.
  std::string query_id_prefix;
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

  // Applies `bounds` to every request from now on, until the next call
  // (QueryBounds{} lifts them).
  void Bound(QueryBounds bounds);

 private:
  explicit Client(ClientOptions options, std::unique_ptr<http::Client> http);
  absl::StatusOr<std::string> Send(const std::string& query, std::string_view body, bool idempotent);
  // Kills `query_id` on the server (a fresh connection, a short timeout);
  // logs when it cannot.
  void Kill(const std::string& query_id);

  ClientOptions options_;
  QueryBounds bounds_;
  uint64_t queries_ = 0;  // query ids sent under bounds_.query_id_prefix
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
