// --allreduce_chunk_kb and its old name --ring_chunk_kb: either is accepted,
// the new one wins when only it was changed, and a disagreement is marked.
#include "allreduce/allreduce_flags.h"

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gtest/gtest.h"

// Set here as a user would (allreduce_flags.cc defines them).
ABSL_DECLARE_FLAG(int, allreduce_chunk_kb);
ABSL_DECLARE_FLAG(int, ring_chunk_kb);

namespace gradsync {
namespace {

TEST(AllReduceFlags, DefaultsAreNotGiven) {
  absl::FlagSaver saver;
  const AllReduceFlagValues values = ReadAllReduceFlags();
  EXPECT_EQ(values.chunk_bytes, 256 << 10);
  EXPECT_FALSE(values.chunk_given);
  EXPECT_FALSE(values.chunk_conflict);
}

TEST(AllReduceFlags, TheOldNameStillSetsTheChunk) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_ring_chunk_kb, 16);
  const AllReduceFlagValues values = ReadAllReduceFlags();
  EXPECT_EQ(values.chunk_bytes, 16 << 10);
  EXPECT_TRUE(values.chunk_given);
  EXPECT_FALSE(values.chunk_conflict);
}

TEST(AllReduceFlags, TheNewNameSetsTheChunk) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_allreduce_chunk_kb, 64);
  const AllReduceFlagValues values = ReadAllReduceFlags();
  EXPECT_EQ(values.chunk_bytes, 64 << 10);
  EXPECT_TRUE(values.chunk_given);
  EXPECT_FALSE(values.chunk_conflict);
}

TEST(AllReduceFlags, BothNamesMustAgree) {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_allreduce_chunk_kb, 64);
  absl::SetFlag(&FLAGS_ring_chunk_kb, 64);
  EXPECT_FALSE(ReadAllReduceFlags().chunk_conflict);
  absl::SetFlag(&FLAGS_ring_chunk_kb, 16);
  const AllReduceFlagValues values = ReadAllReduceFlags();
  EXPECT_TRUE(values.chunk_conflict);
  EXPECT_EQ(values.chunk_bytes, 64 << 10);  // the new name's
}

}  // namespace
}  // namespace gradsync
