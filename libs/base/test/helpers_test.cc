// digest.h and json_fields.h.
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "relay/base/digest.h"
#include "relay/base/json_fields.h"

namespace relay {
namespace {

namespace json = boost::json;

TEST(Digest, Sha256HexOfKnownVectors) {
  // FIPS 180-2's examples.
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  auto d = Sha256("abc");
  EXPECT_EQ(Hex(std::string_view(reinterpret_cast<const char*>(d.data()), d.size())), Sha256Hex("abc"));
  EXPECT_EQ(Hex(std::string_view("\x00\xff\x10", 3)), "00ff10");
}

TEST(JsonFields, AbsentOrMistypedFieldsReadAsEmpty) {
  json::object o = json::parse(R"({"s":"x","n":7,"big":18446744073709551615,"o":{"s":"in"},"a":[1],"z":null})")
                       .as_object();
  EXPECT_EQ(StringField(o, "s"), "x");
  EXPECT_EQ(StringField(o, "n"), "");
  EXPECT_EQ(StringField(o, "missing"), "");
  EXPECT_EQ(StringField(nullptr, "s"), "");
  EXPECT_EQ(IntField(o, "n"), 7);
  EXPECT_EQ(IntField(o, "s"), 0);
  EXPECT_EQ(IntField(o, "z"), 0);
  EXPECT_EQ(IntField(static_cast<const json::object*>(nullptr), "n"), 0);
  ASSERT_NE(ObjectField(o, "o"), nullptr);
  EXPECT_EQ(StringField(ObjectField(o, "o"), "s"), "in");
  EXPECT_EQ(ObjectField(o, "a"), nullptr);
  EXPECT_EQ(ObjectField(ObjectField(o, "missing"), "o"), nullptr);
}

TEST(JsonFields, QuoteEscapes) {
  EXPECT_EQ(JsonQuote("plain"), "\"plain\"");
  EXPECT_EQ(JsonQuote("a\"b\\c\n"), R"("a\"b\\c\n")");
}

}  // namespace
}  // namespace relay
