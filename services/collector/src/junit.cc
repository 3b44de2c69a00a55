#include "relay/collector/junit.h"

#include <cstdio>
#include <ctime>

#include <expat.h>

#include "absl/strings/ascii.h"

#include <boost/json.hpp>
#include <cstring>

namespace relay::collector {

std::string_view OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kPassed: return "passed";
    case Outcome::kFailed: return "failed";
    case Outcome::kError: return "error";
    case Outcome::kSkipped: return "skipped";
  }
  return "passed";
}

namespace {

// Cuts `s` to at most `n` bytes without splitting a UTF-8 sequence.
void CutUtf8(std::string* s, size_t n) {
  if (s->size() <= n) return;
  size_t end = n;
  while (end > 0 && (static_cast<unsigned char>((*s)[end]) & 0xC0) == 0x80) --end;
  s->resize(end);
}

void AppendBounded(std::string* s, std::string_view more, size_t n) {
  if (s->size() >= n) return;
  s->append(more.substr(0, n - s->size() + 4));  // a little over, then cut at a boundary
  CutUtf8(s, n);
}

bool Is(const char* a, const char* b) { return std::strcmp(a, b) == 0; }

class JUnitParser final : public ReportParser {
 public:
  JUnitParser(ReportOptions options, TestCaseSink sink) : options_(options), sink_(std::move(sink)) {
    parser_ = XML_ParserCreate("UTF-8");
    XML_SetUserData(parser_, this);
    XML_SetElementHandler(parser_, &JUnitParser::Start, &JUnitParser::End);
    XML_SetCharacterDataHandler(parser_, &JUnitParser::Text);
    // No DTD at all: no entity can be declared, so none can be expanded
    // (billion laughs, external entities).
    XML_SetStartDoctypeDeclHandler(parser_, &JUnitParser::Doctype);
    XML_SetEntityDeclHandler(parser_, &JUnitParser::Entity);
  }
  ~JUnitParser() override { XML_ParserFree(parser_); }

  absl::Status Feed(std::string_view chunk) override { return Parse(chunk, false); }
  absl::Status Finish() override {
    absl::Status s = Parse({}, true);
    if (!s.ok()) return s;
    if (!saw_root_) return absl::InvalidArgumentError("line 1: no XML element");
    return absl::OkStatus();
  }
  int64_t cases() const override { return cases_; }
  int64_t timestamp_unix_ms() const override { return timestamp_ms_; }

 private:
  absl::Status Parse(std::string_view chunk, bool last) {
    if (!error_.ok()) return error_;
    if (XML_Parse(parser_, chunk.data(), static_cast<int>(chunk.size()), last ? XML_TRUE : XML_FALSE) ==
        XML_STATUS_ERROR) {
      if (error_.ok()) {
        error_ = absl::InvalidArgumentError("line " + std::to_string(XML_GetCurrentLineNumber(parser_)) + ": " +
                                            XML_ErrorString(XML_GetErrorCode(parser_)));
      }
    }
    return error_;
  }

  void Fail(absl::Status s) {
    if (!error_.ok()) return;
    if (absl::IsInvalidArgument(s)) {
      s = absl::InvalidArgumentError("line " + std::to_string(XML_GetCurrentLineNumber(parser_)) + ": " +
                                     std::string(s.message()));
    }
    error_ = std::move(s);
    XML_StopParser(parser_, XML_FALSE);
  }

  std::string Field(const char** attrs, const char* name) {
    for (const char** a = attrs; *a; a += 2) {
      if (Is(a[0], name)) {
        std::string v(a[1]);
        CutUtf8(&v, options_.max_field_bytes);
        return v;
      }
    }
    return "";
  }
  const char* Attr(const char** attrs, const char* name) {
    for (const char** a = attrs; *a; a += 2) {
      if (Is(a[0], name)) return a[1];
    }
    return nullptr;
  }

  static void XMLCALL Start(void* self, const XML_Char* name, const XML_Char** attrs) {
    static_cast<JUnitParser*>(self)->OnStart(name, attrs);
  }
  static void XMLCALL End(void* self, const XML_Char* name) { static_cast<JUnitParser*>(self)->OnEnd(name); }
  static void XMLCALL Text(void* self, const XML_Char* s, int len) {
    static_cast<JUnitParser*>(self)->OnText(std::string_view(s, static_cast<size_t>(len)));
  }
  static void XMLCALL Doctype(void* self, const XML_Char*, const XML_Char*, const XML_Char*, int) {
    static_cast<JUnitParser*>(self)->Fail(absl::InvalidArgumentError("DTDs are not accepted"));
  }
  static void XMLCALL Entity(void* self, const XML_Char*, int, const XML_Char*, int, const XML_Char*,
                             const XML_Char*, const XML_Char*, const XML_Char*) {
    static_cast<JUnitParser*>(self)->Fail(absl::InvalidArgumentError("entity declarations are not accepted"));
  }

  void OnStart(const char* name, const char** attrs) {
    saw_root_ = true;
    if (++depth_ > options_.max_depth) return Fail(absl::InvalidArgumentError("elements nested too deep"));
    if (depth_ == 1 && !Is(name, "testsuites") && !Is(name, "testsuite")) {
      return Fail(absl::InvalidArgumentError(std::string("not a JUnit report: root element <") + name + ">"));
    }
    if (timestamp_ms_ == 0 && (Is(name, "testsuite") || Is(name, "testsuites"))) {
      if (const char* t = Attr(attrs, "timestamp")) timestamp_ms_ = ParseReportTimestamp(t);
    }
    if (Is(name, "testsuite")) {
      suite_files_.push_back(Field(attrs, "file"));
      return;
    }
    if (Is(name, "testcase")) {
      if (in_case_) return Fail(absl::InvalidArgumentError("<testcase> inside <testcase>"));
      in_case_ = true;
      case_ = TestCase{};
      case_.file = Field(attrs, "file");
      if (case_.file.empty() && !suite_files_.empty()) case_.file = suite_files_.back();
      case_.classname = Field(attrs, "classname");
      case_.name = Field(attrs, "name");
      if (case_.name.empty()) return Fail(absl::InvalidArgumentError("<testcase> without a name"));
      if (const char* t = Attr(attrs, "time")) {
        // Surefire writes "1,234.5" for tests over a thousand seconds.
        std::string digits;
        for (const char* c = t; *c && digits.size() < 32; ++c) {
          if (*c != ',') digits.push_back(*c);
        }
        char* end = nullptr;
        double d = std::strtod(digits.c_str(), &end);
        case_.duration_s = end == digits.c_str() || !(d >= 0) || d > 1e9 ? 0 : d;
      }
      if (const char* status = Attr(attrs, "status"); status && (Is(status, "notrun") || Is(status, "disabled"))) {
        case_.outcome = Outcome::kSkipped;
      }
      return;
    }
    if (!in_case_) return;
    // Children of a test case.
    auto outcome_child = [&](Outcome o) {
      // A failure outranks an error, which outranks a skip; the message is
      // the highest-ranked child's (the first of equals).
      if (Rank(o) < Rank(case_.outcome) || (Rank(o) == Rank(case_.outcome) && !case_.message.empty())) return;
      case_.outcome = o;
      case_.message.clear();
      if (const char* m = Attr(attrs, "message"); m && *m) {
        AppendBounded(&case_.message, m, options_.max_message_bytes);
      } else {
        collecting_ = depth_;  // the element's text is the message
      }
    };
    if (Is(name, "failure")) return outcome_child(Outcome::kFailed);
    if (Is(name, "error")) return outcome_child(Outcome::kError);
    if (Is(name, "skipped")) return outcome_child(Outcome::kSkipped);
    if (Is(name, "rerun") || Is(name, "rerunFailure") || Is(name, "rerunError") || Is(name, "flakyFailure") ||
        Is(name, "flakyError")) {
      ++case_.reruns;
    }
  }

  static int Rank(Outcome o) {
    switch (o) {
      case Outcome::kFailed: return 3;
      case Outcome::kError: return 2;
      case Outcome::kSkipped: return 1;
      case Outcome::kPassed: return 0;
    }
    return 0;
  }

  void OnText(std::string_view s) {
    if (collecting_) AppendBounded(&case_.message, s, options_.max_message_bytes);
  }

  void OnEnd(const char* name) {
    if (collecting_ == depth_) collecting_ = 0;
    --depth_;
    if (Is(name, "testsuite")) {
      if (!suite_files_.empty()) suite_files_.pop_back();
      return;
    }
    if (Is(name, "testcase") && in_case_) {
      in_case_ = false;
      ++cases_;
      // Trim the message's surrounding whitespace (CDATA stack traces).
      auto& m = case_.message;
      size_t b = m.find_first_not_of(" \t\r\n");
      m = b == std::string::npos ? std::string() : m.substr(b, m.find_last_not_of(" \t\r\n") - b + 1);
      absl::Status s = sink_(std::move(case_));
      if (!s.ok()) Fail(std::move(s));
    }
  }

  ReportOptions options_;
  TestCaseSink sink_;
  XML_Parser parser_;
  absl::Status error_;
  int depth_ = 0;
  int collecting_ = 0;  // depth of the element whose text is the message; 0: none
  bool in_case_ = false;
  bool saw_root_ = false;
  TestCase case_;
  std::vector<std::string> suite_files_;
  int64_t cases_ = 0;
  int64_t timestamp_ms_ = 0;
};

class JsonReportParser final : public ReportParser {
 public:
  JsonReportParser(ReportOptions options, TestCaseSink sink) : options_(options), sink_(std::move(sink)) {}
  absl::Status Feed(std::string_view chunk) override {
    boost::system::error_code ec;
    parser_.write(chunk.data(), chunk.size(), ec);
    if (ec) return absl::InvalidArgumentError("JSON report: " + ec.message());
    return absl::OkStatus();
  }
  absl::Status Finish() override {
    boost::system::error_code ec;
    parser_.finish(ec);
    if (ec) return absl::InvalidArgumentError("JSON report: " + ec.message());
    boost::json::value doc = parser_.release();
    const boost::json::object* o = doc.if_object();
    const boost::json::value* list = o ? o->if_contains("test_cases") : nullptr;
    if (!list || !list->is_array()) return absl::InvalidArgumentError("JSON report: needs a test_cases array");
    if (const boost::json::value* ts = o->if_contains("timestamp"); ts && ts->is_string()) {
      timestamp_ms_ = ParseReportTimestamp(std::string_view(ts->as_string()));
    }
    size_t index = 0;
    for (const auto& v : list->as_array()) {
      const boost::json::object* c = v.if_object();
      std::string where = "JSON report: test_cases[" + std::to_string(index++) + "]";
      if (!c) return absl::InvalidArgumentError(where + " is not an object");
      auto str = [&](const char* k, size_t bound) {
        const boost::json::value* f = c->if_contains(k);
        std::string s = f && f->is_string() ? std::string(f->as_string()) : std::string();
        CutUtf8(&s, bound);
        return s;
      };
      TestCase t;
      t.file = str("file", options_.max_field_bytes);
      t.classname = str("classname", options_.max_field_bytes);
      t.name = str("name", options_.max_field_bytes);
      if (t.name.empty()) return absl::InvalidArgumentError(where + " has no name");
      if (const boost::json::value* d = c->if_contains("time"); d && d->is_number()) {
        t.duration_s = std::max(0.0, d->to_number<double>());
      }
      std::string outcome = str("outcome", 16);
      if (outcome == "passed" || outcome.empty()) t.outcome = Outcome::kPassed;
      else if (outcome == "failed") t.outcome = Outcome::kFailed;
      else if (outcome == "error") t.outcome = Outcome::kError;
      else if (outcome == "skipped") t.outcome = Outcome::kSkipped;
      else return absl::InvalidArgumentError(where + " outcome must be passed, failed, error or skipped");
      if (const boost::json::value* r = c->if_contains("reruns"); r && r->is_int64()) {
        t.reruns = static_cast<int32_t>(std::clamp<int64_t>(r->as_int64(), 0, 1'000'000));
      }
      t.message = str("message", options_.max_message_bytes);
      ++cases_;
      if (absl::Status s = sink_(std::move(t)); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  int64_t cases() const override { return cases_; }
  int64_t timestamp_unix_ms() const override { return timestamp_ms_; }

 private:
  ReportOptions options_;
  TestCaseSink sink_;
  boost::json::stream_parser parser_;
  int64_t cases_ = 0;
  int64_t timestamp_ms_ = 0;
};

}  // namespace

int64_t ParseReportTimestamp(std::string_view text) {
  std::string t(text.substr(0, 64));
  std::tm tm{};
  int consumed = 0;
  if (std::sscanf(t.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour, &tm.tm_min,
                  &tm.tm_sec, &consumed) != 6 || tm.tm_mon < 1 || tm.tm_mon > 12 || tm.tm_mday < 1 ||
      tm.tm_mday > 31 || tm.tm_hour > 23 || tm.tm_min > 59 || tm.tm_sec > 60) {
    return 0;
  }
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  int64_t ms = static_cast<int64_t>(timegm(&tm)) * 1000;
  std::string_view rest = std::string_view(t).substr(static_cast<size_t>(consumed));
  if (!rest.empty() && rest[0] == '.') {  // a fraction: milliseconds of it
    size_t digits = 1;
    int64_t frac = 0, scale = 100;
    while (digits < rest.size() && absl::ascii_isdigit(static_cast<unsigned char>(rest[digits]))) {
      if (scale > 0) frac += (rest[digits] - '0') * scale;
      scale /= 10;
      ++digits;
    }
    ms += frac;
    rest.remove_prefix(digits);
  }
  if (rest.empty() || rest == "Z") return ms;
  int hh = 0, mm = 0;
  if ((rest[0] == '+' || rest[0] == '-') && std::sscanf(std::string(rest.substr(1)).c_str(), "%2d:%2d", &hh, &mm) == 2) {
    int64_t offset = (hh * 60 + mm) * 60'000;
    return rest[0] == '+' ? ms - offset : ms + offset;
  }
  return 0;
}

std::unique_ptr<ReportParser> NewJUnitParser(ReportOptions options, TestCaseSink sink) {
  return std::make_unique<JUnitParser>(options, std::move(sink));
}

std::unique_ptr<ReportParser> NewJsonReportParser(ReportOptions options, TestCaseSink sink) {
  return std::make_unique<JsonReportParser>(options, std::move(sink));
}

}  // namespace relay::collector
