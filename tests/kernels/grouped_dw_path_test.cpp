// TROUPE_GROUPED_DW and ScopedGroupedDw (kernels/grouped_dw_path.hpp): the four names parse, a
// bad value is an error naming the variable and the allowed values, unset or empty is kernel,
// and an override wins over the variable until it goes.
#include <cstdlib>
#include <string>

#include "kernels/grouped_dw_path.hpp"
#include "tests/test_util.hpp"

namespace troupe::test {
namespace {

constexpr const char* kVariable = "TROUPE_GROUPED_DW";

TEST(GroupedDwPath, NamesParse) {
  for (GroupedDw p : {GroupedDw::loop, GroupedDw::streams, GroupedDw::tf32, GroupedDw::kernel})
    EXPECT_EQ(parse_grouped_dw(grouped_dw_name(p)), p);
  EXPECT_EQ(parse_grouped_dw("kernel"), GroupedDw::kernel);
  try {
    parse_grouped_dw("TF32");
    ADD_FAILURE() << "a misspelled way was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("TROUPE_GROUPED_DW=TF32"), std::string::npos) << msg;
    EXPECT_NE(msg.find("loop, streams, tf32 or kernel"), std::string::npos) << msg;
  }
}

TEST(GroupedDwPath, EnvironmentAndOverride) {
  const char* saved = std::getenv(kVariable);
  const std::string restore = saved ? saved : "";
  ::unsetenv(kVariable);
  EXPECT_EQ(grouped_dw(64), GroupedDw::kernel);
  EXPECT_EQ(grouped_dw(kGroupedDwKernelGroups), GroupedDw::kernel);
  EXPECT_EQ(grouped_dw(kGroupedDwKernelGroups - 1), GroupedDw::streams);
  ::setenv(kVariable, "", 1);
  EXPECT_EQ(grouped_dw(64), GroupedDw::kernel);
  EXPECT_EQ(grouped_dw(8), GroupedDw::streams);
  ::setenv(kVariable, "kernel", 1);
  EXPECT_EQ(grouped_dw(8), GroupedDw::kernel);
  ::setenv(kVariable, "tf32", 1);
  EXPECT_EQ(grouped_dw(8), GroupedDw::tf32);
  {
    const ScopedGroupedDw loop(GroupedDw::loop);
    EXPECT_EQ(grouped_dw(8), GroupedDw::loop);
    {
      const ScopedGroupedDw streams(GroupedDw::streams);
      EXPECT_EQ(grouped_dw(8), GroupedDw::streams);
    }
    EXPECT_EQ(grouped_dw(8), GroupedDw::loop);
  }
  EXPECT_EQ(grouped_dw(8), GroupedDw::tf32);
  ::setenv(kVariable, "stream", 1);
  EXPECT_THROW(grouped_dw(8), Error);
  if (saved)
    ::setenv(kVariable, restore.c_str(), 1);
  else
    ::unsetenv(kVariable);
}

}  // namespace
}  // namespace troupe::test
