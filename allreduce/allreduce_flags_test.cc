// --allreduce_chunk_kb and its old name --ring_chunk_kb: either is accepted,
// the new one wins when only it was changed, and a disagreement is marked.
#include "allreduce/allreduce_flags.h"

#include <cstdint>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gtest/gtest.h"

// Set here as a user would (allreduce_flags.cc defines them).
ABSL_DECLARE_FLAG(int, allreduce_chunk_kb);
ABSL_DECLARE_FLAG(int, ring_chunk_kb);

namespace gradsync {
namespace {

// One way of setting the two names (0: left at its default) and what
// ReadAllReduceFlags makes of it.
struct ChunkCase {
  const char* name;
  int allreduce_chunk_kb;
  int ring_chunk_kb;
  int64_t chunk_bytes;
  bool chunk_given;
  bool chunk_conflict;
};

class AllReduceFlagsTest : public ::testing::TestWithParam<ChunkCase> {};

TEST_P(AllReduceFlagsTest, ReadsTheChunk) {
  const ChunkCase& c = GetParam();
  absl::FlagSaver saver;
  if (c.allreduce_chunk_kb > 0) {
    absl::SetFlag(&FLAGS_allreduce_chunk_kb, c.allreduce_chunk_kb);
  }
  if (c.ring_chunk_kb > 0) absl::SetFlag(&FLAGS_ring_chunk_kb, c.ring_chunk_kb);
  const AllReduceFlagValues values = ReadAllReduceFlags();
  EXPECT_EQ(values.chunk_bytes, c.chunk_bytes);
  EXPECT_EQ(values.chunk_given, c.chunk_given);
  EXPECT_EQ(values.chunk_conflict, c.chunk_conflict);
}

INSTANTIATE_TEST_SUITE_P(
    AllReduceFlags, AllReduceFlagsTest,
    ::testing::Values(
        ChunkCase{"DefaultsAreNotGiven", 0, 0, 256 << 10, false, false},
        ChunkCase{"TheOldNameStillSetsTheChunk", 0, 16, 16 << 10, true, false},
        ChunkCase{"TheNewNameSetsTheChunk", 64, 0, 64 << 10, true, false},
        ChunkCase{"BothNamesMayAgree", 64, 64, 64 << 10, true, false},
        // A disagreement is marked; the new name's value is taken.
        ChunkCase{"BothNamesMustAgree", 64, 16, 64 << 10, true, true}),
    [](const ::testing::TestParamInfo<ChunkCase>& info) {
      return std::string(info.param.name);
    });

}  // namespace
}  // namespace gradsync
