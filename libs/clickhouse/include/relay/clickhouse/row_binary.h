// Rows in ClickHouse's RowBinary format, for inserts: compact (no text
// parsing on the server), supported by 18.16 and current releases alike.
// Values are appended in the table's column order; nothing is checked
// against the schema here (the server refuses a mismatch with a decoded
// error, see client.h).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace relay::clickhouse {

class RowBinary {
 public:
  RowBinary& UInt8(uint8_t v) { return Fixed(v); }
  RowBinary& UInt16(uint16_t v) { return Fixed(v); }
  RowBinary& UInt32(uint32_t v) { return Fixed(v); }
  RowBinary& UInt64(uint64_t v) { return Fixed(v); }
  RowBinary& Int32(int32_t v) { return Fixed(v); }
  RowBinary& Int64(int64_t v) { return Fixed(v); }
  RowBinary& Float64(double v) { return Fixed(v); }
  // DateTime: seconds since the epoch (UInt32); Date: days (UInt16).
  RowBinary& DateTime(int64_t unix_seconds) { return Fixed(static_cast<uint32_t>(unix_seconds)); }
  RowBinary& Date(int64_t unix_days) { return Fixed(static_cast<uint16_t>(unix_days)); }
  RowBinary& String(std::string_view v) {
    Varint(v.size());
    data_.append(v.data(), v.size());
    return *this;
  }
  RowBinary& Strings(const std::vector<std::string>& v) {  // Array(String)
    Varint(v.size());
    for (const auto& s : v) String(s);
    return *this;
  }
  // Array(T): the element count, then the elements (appended by the caller).
  RowBinary& ArrayHeader(size_t n) {
    Varint(n);
    return *this;
  }
  // Nullable(T): a null flag, then the value unless null.
  RowBinary& Null() { return UInt8(1); }
  RowBinary& NotNull() { return UInt8(0); }
  // Rows counted by the caller (EndRow), for batching decisions.
  void EndRow() { ++rows_; }

  const std::string& data() const { return data_; }
  size_t rows() const { return rows_; }
  size_t bytes() const { return data_.size(); }
  // Moves the rows of `other` to the end of these (other is left empty).
  void Append(RowBinary& other) {
    if (data_.empty()) data_.swap(other.data_);
    else data_.append(other.data_);
    rows_ += other.rows_;
    other.Clear();
  }
  void Clear() {
    data_.clear();
    rows_ = 0;
  }

 private:
  template <typename T>
  RowBinary& Fixed(T v) {
    // Little-endian on the wire, as on every machine relay builds for
    // (x86-64, arm64); a big-endian build stops here.
    static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "RowBinary is little-endian");
    data_.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  void Varint(uint64_t n) {
    while (n >= 0x80) {
      data_.push_back(static_cast<char>((n & 0x7f) | 0x80));
      n >>= 7;
    }
    data_.push_back(static_cast<char>(n));
  }

  std::string data_;
  size_t rows_ = 0;
};

}  // namespace relay::clickhouse
