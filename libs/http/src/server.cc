#include "relay/http/server.h"

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>

#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "relay/base/log.h"

namespace relay::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;

namespace {
// The most a connection buffers of what it has not parsed yet. Beast limits
// the header section (header_limit), but not a chunk's size line, its
// extensions or the trailer section: without this cap a client could grow
// the buffer for as long as body_timeout, and a trailer field past 65,533
// bytes makes Beast throw std::length_error (the whole process went down).
// 64 KiB holds the largest header section we take, and keeps any trailer
// field below the size that throws; bodies pass through it as they parse.
constexpr size_t kMaxBuffered = 64 * 1024;

// Runs a loop until it is stopped. A handler that throws is logged and the
// loop goes on (its connection is dropped): one request must not take the
// server down.
void RunLoop(net::io_context& ioc) {
  for (;;) {
    try {
      ioc.run();
      return;
    } catch (const std::exception& e) {
      log::Error("http: a handler threw; its loop goes on", {{"error", std::string(e.what())}});
    }
  }
}

// A JSON string literal (the server has no JSON library of its own; this is
// all it needs, for error messages).
std::string JsonQuote(std::string_view in) {
  std::string out = "\"";
  for (unsigned char c : in) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}
}  // namespace
using tcp = net::ip::tcp;

class ServerImpl;
class Session;

// One event loop: a single-threaded io_context and its thread. Every
// connection is pinned to one loop for its whole life, so its handlers never
// run concurrently and need no strand. Measured on the 2-core dev machine
// (docs/benchmarks.md): two threads sharing one io_context spent about a
// third more CPU per request, in scheduler and reactor lock contention and
// futex wake-ups, than two loops of one thread each.
struct Loop {
  net::io_context ioc{1};  // concurrency hint 1: one thread runs it
  // Keeps run() going while a request waits for its Responder, which is no
  // pending I/O: without it the thread could exit under a drain.
  net::executor_work_guard<net::io_context::executor_type> work{ioc.get_executor()};
  // Responses handed over by threads outside this loop; see Session::Respond.
  std::mutex mailbox_mu;
  struct Mail {
    std::shared_ptr<Session> session;
    uint64_t seq;
    Response response;
  };
  std::vector<Mail> mailbox;
  bool drain_posted = false;  // a drain is posted and has not taken the mailbox yet
  std::thread thread;
  // Member order: the mailbox is declared after ioc and so destroyed first:
  // the sockets of sessions it may still hold close while their io_context
  // exists. No handler posted to ioc owns a Responder (they hold Sessions),
  // so none can reach the mailbox while ioc is destroyed. The accepting loop
  // uses ioc, work and thread only.
};

using Executor = net::io_context::executor_type;
using Socket = net::basic_stream_socket<tcp, Executor>;
using Stream = beast::basic_stream<tcp, Executor, beast::unlimited_rate_policy>;

// One connection, on one loop. Shared by the pending async operation and by
// the Responder of the request in flight.
class Session : public ResponseSink, public std::enable_shared_from_this<Session> {
 public:
  Session(Socket socket, Loop* loop, ServerImpl* server);
  ~Session() override;
  // Runs the first read on the session's loop (accept completes on the
  // acceptor's), so Shutdown's CloseIfIdle never races it.
  void Start() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->ReadHeader(); });
  }
  // Any thread. On the session's own loop the response is written at once.
  // From any other thread it goes through the loop's mailbox: a Kafka
  // delivery report completes dozens of requests in one burst, and posting
  // each would wake the loop's thread once per response (a futex or eventfd
  // write and, on a VM, an inter-processor interrupt each). The mailbox takes
  // the burst under one lock and wakes the loop once.
  void Respond(uint64_t seq, Response response) override;
  void CloseIfIdle();

 private:
  static void DrainMailbox(Loop* loop);
  void WriteResponse(uint64_t seq, Response response);
  // Waits for the first byte of the next request under the idle timeout.
  void AwaitNextRequest();
  void ReadHeader();
  void OnHeader(beast::error_code ec);
  void ReadBody();
  void OnBody(beast::error_code ec);
  // A streamed body (BodyStream): read into chunk_, handed over piece by piece.
  void StartStream(const StreamHandler& handler);
  void ReadStream();
  void OnStream(beast::error_code ec);
  void BeginHandling();  // the request is with its handler from here
  void OnReadError(beast::error_code ec);
  void OnHandlerDeadline(uint64_t seq);
  void Write(Response response, bool close, bool linger = false);
  // After an answer sent before the request's body was read: stop sending,
  // read and drop what the client still sends (bounded), then close. A
  // plain close with unread data makes the kernel send RST, and a client in
  // the middle of its upload would see a reset instead of the answer.
  void LingerAndClose();
  // 431 for a chunk line or trailer section past kMaxBuffered.
  void FramingTooLarge();
  void DiscardSome();
  bool Reserve(int64_t bytes);
  void ReleaseReservation();
  void Close();

  Stream stream_;
  beast::flat_buffer buffer_{kMaxBuffered};
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::optional<bhttp::request_parser<bhttp::buffer_body>> stream_parser_;
  std::shared_ptr<BodyStream> body_stream_;
  std::vector<char> chunk_;
  Loop* loop_;
  ServerImpl* server_;
  net::basic_waitable_timer<std::chrono::steady_clock, net::wait_traits<std::chrono::steady_clock>, Executor>
      handler_timer_;
  bool busy_ = false;       // a request is with the handler or being answered
  bool answered_ = false;   // the request numbered seq_ has its response
  uint64_t seq_ = 0;        // number of the current request on this connection
  bool request_keep_alive_ = true;
  int64_t reserved_ = 0;    // body bytes held against the server's budget
  uint64_t discarded_ = 0;  // bytes dropped while lingering
  // Reserves each chunk of a chunked body as its header arrives (the parser
  // keeps a reference, hence a member).
  std::function<void(std::uint64_t, std::string_view, beast::error_code&)> on_chunk_header_ =
      [this](std::uint64_t size, std::string_view, beast::error_code& e) {
        if (Reserve(static_cast<int64_t>(size))) return;
        over_budget_ = true;
        e = bhttp::error::buffer_overflow;
      };
  // The buffer_overflow of this request came from the body budget (above),
  // not from framing past kMaxBuffered.
  bool over_budget_ = false;
  std::chrono::steady_clock::time_point started_;
};

class ServerImpl final : public Server {
 public:
  ServerImpl(ServerOptions options, Handler handler, prometheus::Registry* metrics)
      : options_(std::move(options)),
        handler_(std::move(handler)),
        own_registry_(metrics ? nullptr : std::make_shared<prometheus::Registry>()),
        registry_(metrics ? metrics : own_registry_.get()),
        responses_(prometheus::BuildCounter()
                       .Name("relay_http_responses_total")
                       .Help("HTTP responses sent, by status code")
                       .Register(*registry_)),
        conn_errors_(prometheus::BuildCounter()
                         .Name("relay_http_connection_errors_total")
                         .Help("Connections ended early, by reason (timeout, truncated, malformed, too_large)")
                         .Register(*registry_)),
        latency_(prometheus::BuildHistogram()
                     .Name("relay_http_request_duration_seconds")
                     .Help("Time from a complete request to its response being written")
                     .Register(*registry_)
                     .Add({}, prometheus::Histogram::BucketBoundaries{0.0005, 0.001, 0.002, 0.005, 0.01, 0.025,
                                                                      0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10})),
        open_(prometheus::BuildGauge()
                  .Name("relay_http_open_connections")
                  .Help("Open HTTP connections")
                  .Register(*registry_)
                  .Add({})),
        body_bytes_gauge_(prometheus::BuildGauge()
                              .Name("relay_http_body_bytes_in_flight")
                              .Help("Request body bytes being received, before their handler took them")
                              .Register(*registry_)
                              .Add({})) {
    for (int i = 0; i < options_.threads; ++i) loops_.push_back(std::make_unique<Loop>());
    acceptor_.emplace(accept_loop_.ioc);
    accept_retry_.emplace(accept_loop_.ioc);
  }

  ~ServerImpl() override {
    Shutdown(std::chrono::milliseconds(0));
  }

  absl::Status Listen() {
    beast::error_code ec;
    auto address = net::ip::make_address(options_.host, ec);
    if (ec) return absl::InvalidArgumentError("http listen address '" + options_.host + "': " + ec.message());
    tcp::endpoint endpoint{address, options_.port};
    acceptor_->open(endpoint.protocol(), ec);
    if (!ec) acceptor_->set_option(net::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_->bind(endpoint, ec);
    if (!ec) acceptor_->listen(net::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError("http listen on " + options_.host + ":" + std::to_string(options_.port) +
                                    ": " + ec.message());
    }
    port_ = acceptor_->local_endpoint().port();
    Accept();
    accept_loop_.thread = std::thread([this] { RunLoop(accept_loop_.ioc); });
    for (auto& loop : loops_) loop->thread = std::thread([l = loop.get()] { RunLoop(l->ioc); });
    return absl::OkStatus();
  }

  uint16_t port() const override { return port_; }
  bool draining() const override { return draining_.load(); }

  bool Shutdown(std::chrono::milliseconds deadline) override {
    if (stopped_.exchange(true)) return all_closed_;
    draining_ = true;
    net::post(acceptor_->get_executor(), [this] {
      beast::error_code ec;
      acceptor_->close(ec);
      accept_retry_->cancel();
    });
    std::vector<std::shared_ptr<Session>> open;
    {
      std::lock_guard lock(mu_);
      // lock() fails for a session whose destructor is already waiting on mu_.
      for (Session* s : sessions_) {
        if (auto self = s->weak_from_this().lock()) open.push_back(std::move(self));
      }
    }
    for (auto& s : open) s->CloseIfIdle();
    open.clear();  // outside mu_: this may run a session's destructor
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, deadline, [this] { return sessions_.empty(); })) {
      all_closed_ = false;
      log::Error("http drain deadline passed: connections cut off",
                 {{"open_connections", static_cast<int64_t>(sessions_.size())}, {"deadline_ms", deadline.count()}});
    }
    lock.unlock();
    std::vector<Loop*> all{&accept_loop_};
    for (auto& loop : loops_) all.push_back(loop.get());
    for (Loop* loop : all) {
      loop->work.reset();
      loop->ioc.stop();
    }
    for (Loop* loop : all) {
      if (loop->thread.joinable()) loop->thread.join();
    }
    return all_closed_;
  }

  void Register(Session* s) {
    std::lock_guard lock(mu_);
    sessions_.insert(s);
    open_.Increment();
  }
  // Takes `bytes` from the body budget; false (nothing taken) past it.
  bool ReserveBody(int64_t bytes) {
    int64_t now = body_bytes_.fetch_add(bytes) + bytes;
    if (now > options_.max_body_bytes_in_flight) {
      body_bytes_.fetch_sub(bytes);
      return false;
    }
    body_bytes_gauge_.Increment(static_cast<double>(bytes));
    return true;
  }
  void ReleaseBody(int64_t bytes) {
    body_bytes_.fetch_sub(bytes);
    body_bytes_gauge_.Decrement(static_cast<double>(bytes));
  }
  uint64_t BodyLimitFor(bhttp::verb method, std::string_view target) const {
    if (!options_.body_limit_for) return options_.body_limit;
    // A streamed route holds nothing: its own limit, not the server's.
    if (StreamFor(method, target)) return options_.body_limit_for(method, target);
    return std::min(options_.body_limit, options_.body_limit_for(method, target));
  }
  const StreamHandler* StreamFor(bhttp::verb method, std::string_view target) const {
    return options_.stream_for ? options_.stream_for(method, target) : nullptr;
  }
  void Unregister(Session* s) {
    std::lock_guard lock(mu_);
    sessions_.erase(s);
    open_.Decrement();
    if (sessions_.empty()) cv_.notify_all();
  }

  int64_t open_connections() {
    std::lock_guard lock(mu_);
    return static_cast<int64_t>(sessions_.size());
  }

  // Past the connection cap: a canned 503 written without waiting (a new
  // socket's send buffer is empty, so the write does not block) and closed.
  void RefuseOverCapacity(Socket socket) {
    static const std::string kOverloaded = [] {
      std::string body = R"({"error":"too many connections; retry"})";
      return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
             "Connection: close\r\nContent-Length: " +
             std::to_string(body.size()) + "\r\n\r\n" + body;
    }();
    CountConnectionError("over_capacity");
    CountResponse(503);
    beast::error_code ec;
    socket.non_blocking(true, ec);
    socket.write_some(net::buffer(kOverloaded), ec);
    socket.shutdown(tcp::socket::shutdown_both, ec);
    socket.close(ec);
  }

  const ServerOptions& options() const { return options_; }
  const Handler& handler() const { return handler_; }
  void CountResponse(unsigned status) {
    // One label lookup per status code ever seen, not per response.
    if (status >= response_counters_.size()) status = 599;
    prometheus::Counter* c = response_counters_[status].load(std::memory_order_acquire);
    if (!c) {
      c = &responses_.Add({{"code", std::to_string(status)}});  // thread-safe, idempotent
      response_counters_[status].store(c, std::memory_order_release);
    }
    c->Increment();
  }
  void CountConnectionError(const char* reason) { conn_errors_.Add({{"reason", reason}}).Increment(); }
  void ObserveLatency(double seconds) { latency_.Observe(seconds); }

 private:
  void Accept() {
    // Round-robin: each connection goes to the next loop and stays there.
    Loop* loop = loops_[next_loop_++ % loops_.size()].get();
    acceptor_->async_accept(loop->ioc, [this, loop](beast::error_code ec, Socket socket) {
      if (ec) {
        if (ec == net::error::operation_aborted || !acceptor_->is_open()) return;
        // Persistent errors (EMFILE, ENFILE, ENOBUFS) fail again at once:
        // back off instead of spinning a thread and flooding the log.
        CountConnectionError("accept");
        log::Warn("accept failed; retrying in 100 ms", {{"error", ec.message()}});
        accept_retry_->expires_after(std::chrono::milliseconds(100));
        accept_retry_->async_wait([this](beast::error_code e) {
          if (!e && acceptor_->is_open()) Accept();
        });
        return;
      }
      if (!draining_) {
        beast::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        if (open_connections() >= options_.max_connections) {
          RefuseOverCapacity(std::move(socket));
        } else {
          std::make_shared<Session>(std::move(socket), loop, this)->Start();
        }
      }
      Accept();
    });
  }

  // Declaration order matters: the loops are destroyed before the members
  // that the sessions they still hold touch in their destructors (mu_,
  // sessions_, metrics), and the acceptor and its timer before their loop.
  ServerOptions options_;
  Handler handler_;
  std::shared_ptr<prometheus::Registry> own_registry_;
  prometheus::Registry* registry_;
  prometheus::Family<prometheus::Counter>& responses_;
  prometheus::Family<prometheus::Counter>& conn_errors_;
  prometheus::Histogram& latency_;
  prometheus::Gauge& open_;
  std::array<std::atomic<prometheus::Counter*>, 600> response_counters_{};
  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_set<Session*> sessions_;
  prometheus::Gauge& body_bytes_gauge_;
  std::atomic<int64_t> body_bytes_{0};
  std::atomic<bool> draining_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<bool> all_closed_{true};  // set by the first Shutdown
  uint16_t port_ = 0;
  std::vector<std::unique_ptr<Loop>> loops_;
  // Accepting has a loop and thread of its own: on a serving loop, one slow
  // request (the HMAC of a 25 MB body, a /metrics scrape) would hold up
  // every new connection, whichever loop it was bound for.
  Loop accept_loop_;
  size_t next_loop_ = 0;  // on accept_loop_'s thread, or before it runs
  std::optional<net::basic_socket_acceptor<tcp, Executor>> acceptor_;
  std::optional<net::basic_waitable_timer<std::chrono::steady_clock, net::wait_traits<std::chrono::steady_clock>,
                                          Executor>>
      accept_retry_;
};

Session::Session(Socket socket, Loop* loop, ServerImpl* server)
    : stream_(std::move(socket)), loop_(loop), server_(server), handler_timer_(loop->ioc.get_executor()) {
  server_->Register(this);
}

Session::~Session() {
  ReleaseReservation();
  server_->Unregister(this);
}

bool Session::Reserve(int64_t bytes) {
  if (bytes <= 0) return true;
  if (!server_->ReserveBody(bytes)) return false;
  reserved_ += bytes;
  return true;
}

void Session::ReleaseReservation() {
  if (reserved_ > 0) server_->ReleaseBody(reserved_);
  reserved_ = 0;
}

void Session::AwaitNextRequest() {
  parser_.reset();  // the last request is done; CloseIfIdle must see an idle connection
  stream_parser_.reset();
  body_stream_.reset();
  if (server_->draining()) return Close();
  if (buffer_.size() > 0) return ReadHeader();  // pipelined: the next request is here
  // A large body grew the buffer; give that memory back between requests.
  if (buffer_.capacity() > 64 * 1024) buffer_.shrink_to_fit();
  stream_.expires_after(server_->options().idle_timeout);
  stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](beast::error_code ec, size_t n) {
    if (ec) return self->Close();  // idle timeout, or the client closed: not an error
    self->buffer_.commit(n);
    self->ReadHeader();
  });
}

void Session::ReadHeader() {
  if (server_->draining() && buffer_.size() == 0) return Close();
  parser_.emplace();
  over_budget_ = false;
  // The route's limit is applied once the header says which route it is
  // (OnHeader); a streamed route may take more than the server-wide limit.
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
  parser_->header_limit(64 * 1024);
  stream_.expires_after(server_->options().header_timeout);
  bhttp::async_read_header(stream_, buffer_, *parser_,
                           [self = shared_from_this()](beast::error_code e, size_t) { self->OnHeader(e); });
}

void Session::OnHeader(beast::error_code ec) {
  if (ec) return OnReadError(ec);
  auto& req = parser_->get();
  // The route's own limit: a declared Content-Length over it is refused now,
  // before any body byte is read (one over the server-wide limit already
  // was, by the parser).
  uint64_t limit = server_->BodyLimitFor(req.method(), req.target());
  auto length = parser_->content_length();
  if (length && *length > limit) {
    server_->CountConnectionError("too_large");
    return Write(MakeResponse(413, R"({"error":"request body exceeds the limit"})"), true, true);
  }
  parser_->body_limit(limit);
  if (const StreamHandler* stream = server_->StreamFor(req.method(), req.target())) return StartStream(*stream);
  // The body budget: what the body will hold until its handler takes it.
  // Chunked bodies reserve chunk by chunk as they arrive.
  if (length && !Reserve(static_cast<int64_t>(*length))) {
    server_->CountConnectionError("body_budget");
    Response busy = MakeResponse(503, R"({"error":"too many request bodies in flight; retry"})");
    busy.set(bhttp::field::retry_after, "1");
    return Write(std::move(busy), true, true);
  }
  if (parser_->chunked()) parser_->on_chunk_header(on_chunk_header_);
  if (beast::iequals(req[bhttp::field::expect], "100-continue")) {
    // Asynchronous and under the deadline: a client that never reads must
    // not be able to block an I/O thread on this write.
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    stream_.expires_after(server_->options().body_timeout);
    net::async_write(stream_, net::buffer(kContinue), [self = shared_from_this()](beast::error_code e, size_t) {
      if (e) return self->Close();
      self->ReadBody();
    });
    return;
  }
  ReadBody();
}

void Session::ReadBody() {
  // Beast sizes each socket read by the buffer's spare capacity (at least
  // 512 bytes), and the parser drains the buffer into the body as it goes,
  // so without this a 10 KB body arrives in ~20 reads. Room for the declared
  // body (capped) makes it one or two reads; memory stays proportional to
  // the request in flight.
  if (auto length = parser_->content_length(); length && *length > 0) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(*length, kMaxBuffered - buffer_.size()));
    if (buffer_.capacity() - buffer_.size() < want) buffer_.reserve(buffer_.size() + want);
  }
  stream_.expires_after(server_->options().body_timeout);
  bhttp::async_read(stream_, buffer_, *parser_,
                    [self = shared_from_this()](beast::error_code e, size_t) { self->OnBody(e); });
}

void Session::BeginHandling() {
  stream_.expires_never();
  busy_ = true;
  answered_ = false;
  uint64_t seq = ++seq_;
  started_ = std::chrono::steady_clock::now();
  handler_timer_.expires_after(server_->options().handler_timeout);
  handler_timer_.async_wait([self = shared_from_this(), seq](beast::error_code e) {
    if (!e) self->OnHandlerDeadline(seq);
  });
}

void Session::StartStream(const StreamHandler& handler) {
  auto decision = handler(parser_->get().base());
  if (auto* refusal = std::get_if<Response>(&decision)) {
    // Refused on its header: the body is never read.
    return Write(std::move(*refusal), true, true);
  }
  body_stream_ = std::move(std::get<std::shared_ptr<BodyStream>>(decision));
  stream_parser_.emplace(std::move(*parser_));
  parser_.reset();
  stream_parser_->body_limit(server_->BodyLimitFor(stream_parser_->get().method(), stream_parser_->get().target()));
  chunk_.resize(64 * 1024);
  if (beast::iequals(stream_parser_->get()[bhttp::field::expect], "100-continue")) {
    static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    stream_.expires_after(server_->options().body_timeout);
    net::async_write(stream_, net::buffer(kContinue), [self = shared_from_this()](beast::error_code e, size_t) {
      if (e) return self->Close();
      self->ReadStream();
    });
    return;
  }
  ReadStream();
}

void Session::ReadStream() {
  auto& body = stream_parser_->get().body();
  body.data = chunk_.data();
  body.size = chunk_.size();  // OnStream hands over only what this read filled
  body.more = true;
  if (stream_parser_->is_done()) return OnStream({});  // an empty body: nothing to read
  stream_.expires_after(server_->options().body_timeout);
  bhttp::async_read(stream_, buffer_, *stream_parser_,
                    [self = shared_from_this()](beast::error_code e, size_t) { self->OnStream(e); });
}

void Session::OnStream(beast::error_code ec) {
  if (ec == bhttp::error::need_buffer) ec = {};
  if (ec) {
    body_stream_.reset();  // the upload failed: the route just lets go
    bool got_some = stream_parser_->got_some();
    stream_parser_.reset();
    if (ec == bhttp::error::body_limit) {
      server_->CountConnectionError("too_large");
      return Write(MakeResponse(413, R"({"error":"request body exceeds the limit"})"), true, true);
    }
    if (ec == bhttp::error::buffer_overflow) return FramingTooLarge();
    if (ec == beast::error::timeout) {
      if (got_some) server_->CountConnectionError("timeout");
      return Close();
    }
    server_->CountConnectionError(ec == bhttp::error::partial_message || ec == net::error::eof ||
                                          ec == net::error::connection_reset
                                      ? "truncated"
                                      : "malformed");
    return Close();
  }
  size_t got = chunk_.size() - stream_parser_->get().body().size;
  if (got > 0) {
    absl::Status st = body_stream_->OnData(std::string_view(chunk_.data(), got));
    if (!st.ok()) {
      body_stream_.reset();
      stream_parser_.reset();
      return Write(MakeResponse(StatusToHttp(st), "{\"error\":" + JsonQuote(std::string(st.message())) + "}"), true, true);
    }
  }
  if (!stream_parser_->is_done()) return ReadStream();
  request_keep_alive_ = stream_parser_->get().keep_alive();
  BeginHandling();
  auto stream = std::move(body_stream_);
  stream->OnEnd(Responder(shared_from_this(), seq_));
}

void Session::OnBody(beast::error_code ec) {
  if (ec) return OnReadError(ec);
  Request request = parser_->release();
  request_keep_alive_ = request.keep_alive();
  BeginHandling();
  uint64_t seq = seq_;
  server_->handler()(std::move(request), Responder(shared_from_this(), seq));
  // The handler authenticated the request (or handed it on): its body no
  // longer counts against the budget for unauthenticated bytes.
  ReleaseReservation();
}

void Session::OnHandlerDeadline(uint64_t seq) {
  if (seq != seq_ || answered_) return;
  server_->CountConnectionError("handler_timeout");
  log::Warn("request not answered by its handler in time; answering 503",
            {{"timeout_ms", server_->options().handler_timeout.count()}});
  Response late = MakeResponse(503, R"({"error":"the request was not answered in time; retry"})");
  late.set(bhttp::field::retry_after, "1");
  WriteResponse(seq, std::move(late));
}

void Session::OnReadError(beast::error_code ec) {
  bool got_some = parser_ && parser_->got_some();
  if (ec == bhttp::error::end_of_stream || ec == net::error::operation_aborted ||
      (!got_some && (ec == net::error::eof || ec == net::error::connection_reset))) {
    return Close();  // the client closed between requests, or we are shutting down
  }
  if (ec == beast::error::timeout) {
    if (got_some) server_->CountConnectionError("timeout");
    return Close();
  }
  if (ec == bhttp::error::body_limit) {
    server_->CountConnectionError("too_large");
    return Write(MakeResponse(413, R"({"error":"request body exceeds the limit"})"), true, true);
  }
  if (ec == bhttp::error::buffer_overflow && !over_budget_) return FramingTooLarge();
  if (ec == bhttp::error::buffer_overflow) {  // a chunk past the body budget
    server_->CountConnectionError("body_budget");
    Response busy = MakeResponse(503, R"({"error":"too many request bodies in flight; retry"})");
    busy.set(bhttp::field::retry_after, "1");
    return Write(std::move(busy), true, true);
  }
  if (ec == bhttp::error::header_limit) {
    server_->CountConnectionError("too_large");
    return Write(MakeResponse(431, R"({"error":"request headers too large"})"), true, true);
  }
  if (ec == bhttp::error::partial_message || ec == net::error::eof || ec == net::error::connection_reset) {
    server_->CountConnectionError("truncated");
    return Close();
  }
  server_->CountConnectionError("malformed");
  Write(MakeResponse(400, R"({"error":"malformed HTTP request"})"), true, true);
}

void Session::FramingTooLarge() {
  server_->CountConnectionError("too_large");
  log::Info("http: request refused: a chunk line, its extensions or the trailers exceed the buffer",
            {{"limit_bytes", static_cast<int64_t>(kMaxBuffered)}});
  Write(MakeResponse(431, R"({"error":"request framing too large: a chunk line, its extensions or the trailers"})"), true, true);
}

void Session::Respond(uint64_t seq, Response response) {
  if (loop_->ioc.get_executor().running_in_this_thread()) return WriteResponse(seq, std::move(response));
  bool post = false;
  {
    std::lock_guard lock(loop_->mailbox_mu);
    loop_->mailbox.push_back({shared_from_this(), seq, std::move(response)});
    post = !loop_->drain_posted;
    loop_->drain_posted = true;
  }
  if (post) net::post(loop_->ioc, [loop = loop_] { DrainMailbox(loop); });
}

void Session::DrainMailbox(Loop* loop) {
  std::vector<Loop::Mail> items;
  {
    std::lock_guard lock(loop->mailbox_mu);
    items.swap(loop->mailbox);
    loop->drain_posted = false;
  }
  for (auto& mail : items) mail.session->WriteResponse(mail.seq, std::move(mail.response));
}

void Session::WriteResponse(uint64_t seq, Response response) {
  // A handler answering after its deadline already answered 503.
  if (seq != seq_ || answered_ || !busy_) return;
  answered_ = true;
  handler_timer_.cancel();
  server_->ObserveLatency(std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count());
  bool close = !request_keep_alive_ || server_->draining();
  Write(std::move(response), close);
}

void Session::Write(Response response, bool close, bool linger) {
  server_->CountResponse(response.result_int());
  response.keep_alive(!close);
  response.prepare_payload();
  auto shared = std::make_shared<Response>(std::move(response));
  stream_.expires_after(server_->options().body_timeout);
  bhttp::async_write(stream_, *shared,
                     [self = shared_from_this(), shared, close, linger](beast::error_code ec, size_t) {
                       self->busy_ = false;
                       if (!ec && linger) return self->LingerAndClose();
                       if (ec || close) return self->Close();
                       self->AwaitNextRequest();
                     });
}

void Session::LingerAndClose() {
  // Its body reservation is not needed for bytes we drop.
  ReleaseReservation();
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  // As nginx's lingering_close: a bounded time and amount.
  stream_.expires_after(std::chrono::seconds(2));
  discarded_ = 0;
  buffer_.clear();
  DiscardSome();
}

void Session::DiscardSome() {
  constexpr uint64_t kMaxDiscard = 64ull * 1024 * 1024;
  stream_.async_read_some(buffer_.prepare(64 * 1024), [self = shared_from_this()](beast::error_code ec, size_t n) {
    self->discarded_ += n;
    if (ec || self->discarded_ > kMaxDiscard) return self->Close();
    self->buffer_.clear();
    self->DiscardSome();
  });
}

void Session::CloseIfIdle() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
    bool mid_request = (self->parser_ && self->parser_->got_some()) || self->stream_parser_ || self->buffer_.size() > 0;
    if (!self->busy_ && !mid_request) self->Close();
  });
}

void Session::Close() {
  beast::error_code ec;
  handler_timer_.cancel();
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.socket().close(ec);
  ReleaseReservation();
}

unsigned StatusToHttp(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kResourceExhausted: return 413;
    case absl::StatusCode::kDeadlineExceeded: return 408;
    case absl::StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

Responder::Responder(std::shared_ptr<ResponseSink> sink, uint64_t seq) : sink_(std::move(sink)), seq_(seq) {}
Responder::Responder(Responder&&) noexcept = default;
Responder& Responder::operator=(Responder&&) noexcept = default;
Responder::~Responder() {
  if (sink_) {
    log::Error("request dropped without a response; answering 500");
    sink_->Respond(seq_, MakeResponse(500, R"({"error":"internal error"})"));
  }
}

void Responder::Send(Response response) {
  if (!sink_) return;
  auto sink = std::move(sink_);
  sink->Respond(seq_, std::move(response));
}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(ServerOptions options, Handler handler,
                                                      prometheus::Registry* metrics) {
  if (options.threads < 1) return absl::InvalidArgumentError("http threads must be >= 1");
  auto server = std::make_unique<ServerImpl>(std::move(options), std::move(handler), metrics);
  if (auto s = server->Listen(); !s.ok()) return s;
  return std::unique_ptr<Server>(std::move(server));
}

}  // namespace relay::http
