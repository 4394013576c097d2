// Reading API request fields: a number is range-checked as sent, so an integer past its type
// (4294967297 for an int) is refused naming the field instead of wrapping into range.
#include <gtest/gtest.h>

#include "actors/serve/api_request.hpp"

namespace troupe::test {
namespace {

using json = nlohmann::json;
using actors::ApiError;
using actors::number;

TEST(ApiRequest, IntegersPastTheirTypeAreRefusedNotWrapped) {
  const json j = {{"top_k", 4294967297LL}, {"n", 4294967297ULL}, {"stop_token", 4294967558LL}, {"seed", 7}};
  for (const char* key : {"top_k", "n", "stop_token"}) {
    try {
      (void)number<int>(j, key, 0, 0, 1000000);
      ADD_FAILURE() << key << " was accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.param, key);
      EXPECT_NE(std::string(e.what()).find("4294967"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(number<uint64_t>(j, "seed", 0, 0, 1.8e19), 7u);
  EXPECT_EQ(number<int>(json{{"top_k", 40}}, "top_k", 0, 0, 1000), 40);
  EXPECT_THROW((void)number<int>(json{{"top_k", -1}}, "top_k", 0, 0, 1000), ApiError);
  EXPECT_THROW((void)number<int>(json{{"top_k", 1.5}}, "top_k", 0, 0, 1000), ApiError);
}

}  // namespace
}  // namespace troupe::test
