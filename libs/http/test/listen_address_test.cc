#include <gtest/gtest.h>

#include "relay/http/server.h"

namespace relay::http {
namespace {

TEST(ListenAddressTest, ParsesHostAndPort) {
  ServerOptions o;
  ASSERT_TRUE(ParseListenAddress("0.0.0.0:8080", &o).ok());
  EXPECT_EQ(o.host, "0.0.0.0");
  EXPECT_EQ(o.port, 8080);
  ASSERT_TRUE(ParseListenAddress("127.0.0.1:0", &o).ok());
  EXPECT_EQ(o.port, 0);
}

TEST(ListenAddressTest, RejectsMalformedAddresses) {
  ServerOptions o;
  for (const char* bad : {"8080", ":8080", "host:", "host:http", "host:65536", "host:80x", "host:-1"}) {
    EXPECT_FALSE(ParseListenAddress(bad, &o).ok()) << bad;
  }
}

}  // namespace
}  // namespace relay::http
