#include "core/cluster/local_address.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

TEST(LocalAddressTest, TowardLoopbackIsLoopback) {
  auto address = LocalAddressToward("127.0.0.1", 29500);
  ASSERT_TRUE(address.ok()) << address.status();
  EXPECT_EQ(*address, "127.0.0.1");
}

TEST(LocalAddressTest, UnresolvableHostIsNamed) {
  auto address = LocalAddressToward("no-such-host.invalid", 29500);
  ASSERT_FALSE(address.ok());
  EXPECT_THAT(std::string(address.status().message()),
              HasSubstr("cannot resolve no-such-host.invalid"));
}

}  // namespace
}  // namespace gradsync
