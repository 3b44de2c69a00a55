// Placeholder replaced below.
#include <gtest/gtest.h>
TEST(SchedulerTest, Placeholder) { SUCCEED(); }
