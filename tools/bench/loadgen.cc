// relay-loadgen: HTTP load generator for webhook receivers.
//
// Posts the signed corpus (tools/fixtures/corpus) round-robin, each request
// with a fresh X-GitHub-Delivery (the signature covers only the body, so it
// stays valid) so no receiver can short-circuit on a repeated id.
//
// Two modes:
//   --rate 0   closed loop: each connection sends as soon as its previous
//              response arrived (saturation throughput)
//   --rate R   open loop at R requests/s: request i is due at start + i/R and
//              its latency is measured from that due time, so a server that
//              falls behind is charged for the queueing it causes (no
//              coordinated omission, as in wrk2)
//
// Why not wrk: Debian's wrk has no fixed-rate mode, and wrk2 is not packaged.
// One thread, raw gather writes of pre-built headers and bodies, so the
// generator takes as little CPU from the 2-core box as we can manage.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string host = "127.0.0.1";
  uint16_t port = 0;
  std::string target = "/github/webhook";
  std::string corpus;
  int connections = 32;
  double rate = 0;
  double duration = 10;
  double warmup = 2;
  int64_t requests = 0;  // stop after this many (0: use duration)
  std::string prefix = "lg";
  int pid = 0;           // sample this process's RSS
  bool json = false;
};

struct Payload {
  std::string head;  // request line and fixed headers, without the delivery id
  std::string body;
};

struct Stats {
  std::vector<uint32_t> latency_us;
  std::map<int, int64_t> status;
  int64_t errors = 0;
  int64_t bytes = 0;
};

std::vector<Payload> LoadCorpus(const Options& o) {
  std::ifstream manifest(o.corpus + "/manifest.tsv");
  std::vector<Payload> out;
  std::string line;
  while (std::getline(manifest, line)) {
    std::istringstream f(line);
    std::string event, file, sig, extra;
    std::getline(f, event, '\t');
    std::getline(f, file, '\t');
    std::getline(f, sig, '\t');
    // A fourth column is one more raw header line (a callback's
    // "Authorization: Bearer ..."); "-" leaves event or signature out.
    std::getline(f, extra, '\t');
    std::ifstream in(o.corpus + "/" + file, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    Payload p;
    p.body = ss.str();
    p.head = "POST " + o.target + " HTTP/1.1\r\nHost: " + o.host + "\r\nUser-Agent: GitHub-Hookshot/relay-loadgen\r\n"
             "Content-Type: application/json\r\n";
    if (event != "-") p.head += "X-GitHub-Event: " + event + "\r\n";
    if (sig != "-") p.head += "X-Hub-Signature-256: " + sig + "\r\n";
    if (!extra.empty()) p.head += extra + "\r\n";
    p.head += "Content-Length: " + std::to_string(p.body.size()) + "\r\n";
    out.push_back(std::move(p));
  }
  return out;
}

long RssKb(int pid, const char* field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0) return std::stol(line.substr(std::string(field).size()));
  }
  return -1;
}

class Run {
 public:
  Run(net::io_context& ioc, const Options& o, const std::vector<Payload>& corpus)
      : ioc_(ioc), o_(o), corpus_(corpus), tick_(ioc) {}

  void Start() {
    start_ = Clock::now();
    measure_from_ = start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.warmup));
    end_ = measure_from_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o_.duration));
    for (int i = 0; i < o_.connections; ++i) std::make_shared<Conn>(this)->Connect();
    Sample();
  }

  Stats stats;
  double elapsed_seconds() const { return std::chrono::duration<double>(last_done_ - start_).count(); }
  double measured_seconds() const {
    return std::chrono::duration<double>(std::min(last_done_, end_) - measure_from_).count();
  }
  long max_rss_kb = -1;

 private:
  struct Conn : std::enable_shared_from_this<Conn> {
    explicit Conn(Run* r) : run(r), stream(r->ioc_) {}
    void Connect() {
      stream.async_connect(tcp::endpoint(net::ip::make_address(run->o_.host), run->o_.port),
                           [self = shared_from_this()](beast::error_code ec) {
                             if (ec) {
                               self->run->stats.errors++;
                               return;
                             }
                             self->stream.set_option(tcp::no_delay(true));
                             self->Next();
                           });
    }
    void Next() {
      auto due = run->NextDue();
      if (!due) return;
      this->due = *due;
      if (*due > Clock::now()) {
        timer = std::make_unique<net::steady_timer>(run->ioc_, *due);
        timer->async_wait([self = shared_from_this()](beast::error_code) { self->Send(); });
      } else {
        Send();
      }
    }
    void Send() {
      const Payload& p = run->corpus_[run->seq_ % run->corpus_.size()];
      delivery = "X-GitHub-Delivery: " + run->o_.prefix + "-" + std::to_string(run->seq_++) + "\r\n\r\n";
      sent = Clock::now();
      run->in_flight_++;
      std::array<net::const_buffer, 3> bufs{net::buffer(p.head), net::buffer(delivery), net::buffer(p.body)};
      net::async_write(stream, bufs, [self = shared_from_this()](beast::error_code ec, size_t n) {
        if (ec) return self->Fail();
        self->run->stats.bytes += static_cast<int64_t>(n);
        self->parser.emplace();
        self->parser->body_limit(1 << 20);
        bhttp::async_read(self->stream, self->buffer, *self->parser,
                          [self](beast::error_code e, size_t) { self->OnResponse(e); });
      });
    }
    void OnResponse(beast::error_code ec) {
      if (ec) return Fail();
      run->in_flight_--;
      auto now = Clock::now();
      run->last_done_ = now;
      // Open loop: latency from the due time; closed loop: from the send.
      auto from = run->o_.rate > 0 ? due : sent;
      if (sent >= run->measure_from_ && now <= run->end_) {
        run->stats.latency_us.push_back(
            static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::microseconds>(now - from).count()));
        run->stats.status[parser->get().result_int()]++;
      } else if (run->o_.requests > 0) {
        run->stats.status[parser->get().result_int()]++;
        run->stats.latency_us.push_back(
            static_cast<uint32_t>(std::chrono::duration_cast<std::chrono::microseconds>(now - from).count()));
      }
      if (!parser->get().keep_alive()) {
        stream.close();
        stream = tcp::socket(run->ioc_);
        buffer.clear();
        return Connect();
      }
      Next();
    }
    void Fail() {
      run->in_flight_--;
      run->stats.errors++;
      stream.close();
      if (Clock::now() < run->end_ && run->o_.requests == 0) {
        stream = tcp::socket(run->ioc_);
        buffer.clear();
        Connect();
      }
    }
    Run* run;
    tcp::socket stream;
    beast::flat_buffer buffer;
    std::optional<bhttp::response_parser<bhttp::string_body>> parser;
    std::unique_ptr<net::steady_timer> timer;
    std::string delivery;
    Clock::time_point due, sent;
  };

  std::optional<Clock::time_point> NextDue() {
    if (o_.requests > 0) {
      if (issued_ >= o_.requests) return std::nullopt;
      ++issued_;
      return Clock::now();
    }
    auto now = Clock::now();
    if (now >= end_) return std::nullopt;
    if (o_.rate <= 0) return now;
    auto due = start_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(issued_ / o_.rate));
    ++issued_;
    if (due >= end_) return std::nullopt;
    return due;
  }

  // Samples RSS and bounds the run: a server that stops answering cannot
  // hang the generator past its end (+10 s; 10 min in --requests mode).
  void Sample() {
    if (o_.pid > 0) max_rss_kb = std::max(max_rss_kb, RssKb(o_.pid, "VmRSS:"));
    auto now = Clock::now();
    int64_t done = stats.errors;
    for (auto& [code, n] : stats.status) done += n;
    if (o_.requests > 0 ? (done >= o_.requests || now > start_ + std::chrono::minutes(10))
                        : (now > end_ && in_flight_ <= 0) || now > end_ + std::chrono::seconds(10)) {
      ioc_.stop();
      return;
    }
    tick_.expires_after(std::chrono::milliseconds(250));
    tick_.async_wait([this](beast::error_code ec) {
      if (!ec) Sample();
    });
  }

  net::io_context& ioc_;
  const Options& o_;
  const std::vector<Payload>& corpus_;
  net::steady_timer tick_;
  Clock::time_point start_, measure_from_, end_, last_done_;
  int64_t issued_ = 0;
  int64_t in_flight_ = 0;
  int64_t seq_ = 0;
};

double Percentile(std::vector<uint32_t>& v, double p) {
  if (v.empty()) return 0;
  size_t i = std::min(v.size() - 1, static_cast<size_t>(p / 100.0 * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(i), v.end());
  return v[i] / 1000.0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "relay-loadgen: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--host") o.host = val();
    else if (a == "--port") o.port = static_cast<uint16_t>(std::stoi(val()));
    else if (a == "--target") o.target = val();
    else if (a == "--corpus") o.corpus = val();
    else if (a == "--connections") o.connections = std::stoi(val());
    else if (a == "--rate") o.rate = std::stod(val());
    else if (a == "--duration") o.duration = std::stod(val());
    else if (a == "--warmup") o.warmup = std::stod(val());
    else if (a == "--requests") o.requests = std::stoll(val());
    else if (a == "--prefix") o.prefix = val();
    else if (a == "--pid") o.pid = std::stoi(val());
    else if (a == "--json") o.json = true;
    else {
      std::cerr << "usage: relay-loadgen --port P --corpus DIR [--host H] [--target PATH] [--connections N]\n"
                   "         [--rate R|0] [--duration S] [--warmup S] [--requests N] [--prefix ID] [--pid PID] [--json]\n";
      return 2;
    }
  }
  if (o.port == 0 || o.corpus.empty()) {
    std::cerr << "relay-loadgen: --port and --corpus are required\n";
    return 2;
  }
  auto corpus = LoadCorpus(o);
  if (corpus.empty()) {
    std::cerr << "relay-loadgen: no payloads in " << o.corpus << "/manifest.tsv\n";
    return 2;
  }
  if (o.requests > 0) {
    o.warmup = 0;
    o.duration = 3600;
    o.connections = static_cast<int>(std::min<int64_t>(o.connections, o.requests));
  }
  net::io_context ioc(1);
  Run run(ioc, o, corpus);
  run.Start();
  ioc.run();

  auto& s = run.stats;
  int64_t ok = 0, total = 0;
  for (auto& [code, n] : s.status) {
    total += n;
    if (code >= 200 && code < 300) ok += n;
  }
  double secs = o.requests > 0 ? run.elapsed_seconds() : run.measured_seconds();
  double rps = secs > 0 ? static_cast<double>(total) / secs : 0;
  double p50 = Percentile(s.latency_us, 50), p90 = Percentile(s.latency_us, 90), p99 = Percentile(s.latency_us, 99),
         p999 = Percentile(s.latency_us, 99.9);
  if (o.json) {
    std::printf("{\"requests\":%lld,\"ok\":%lld,\"errors\":%lld,\"seconds\":%.3f,\"rps\":%.1f,\"p50_ms\":%.3f,"
                "\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"p999_ms\":%.3f,\"max_rss_kb\":%ld,\"status\":{",
                static_cast<long long>(total), static_cast<long long>(ok), static_cast<long long>(s.errors), secs, rps,
                p50, p90, p99, p999, run.max_rss_kb);
    bool first = true;
    for (auto& [code, n] : s.status) {
      std::printf("%s\"%d\":%lld", first ? "" : ",", code, static_cast<long long>(n));
      first = false;
    }
    std::printf("}}\n");
  } else {
    std::printf("requests %lld (2xx %lld, errors %lld) in %.2fs: %.0f req/s; latency p50 %.2f ms, p90 %.2f ms, "
                "p99 %.2f ms\n",
                static_cast<long long>(total), static_cast<long long>(ok), static_cast<long long>(s.errors), secs, rps,
                p50, p90, p99);
    for (auto& [code, n] : s.status) std::printf("  HTTP %d: %lld\n", code, static_cast<long long>(n));
  }
  return s.errors > 0 && ok == 0 ? 1 : 0;
}
