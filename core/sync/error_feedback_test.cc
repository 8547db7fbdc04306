// ErrorFeedback's checkpoint files: written at the trainer's checkpoint
// steps, read back on resume (the previous file when the job stopped between
// a worker's write and worker 0's), refused when they do not belong.
#include "core/sync/error_feedback.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

using ::testing::HasSubstr;

CompressionSpec Spec(const char* text) {
  return CompressionSpec::Parse(text).value();
}

class ErrorFeedbackTest : public testing::Test {
 protected:
  void SetUp() override {
    path_ = absl::StrCat(testing::TempDir(), "/ef_", ::getpid(), ".ckpt");
    schedule_.checkpoint_path = path_;
    schedule_.checkpoint_every = 5;
    schedule_.steps_per_epoch = 100;
    schedule_.total_steps = 100;
  }
  void TearDown() override {
    const std::string file = ErrorFeedback::PathFor(path_, 1);
    std::remove(file.c_str());
    std::remove((file + ".previous").c_str());
  }
  std::string path_;
  TrainingSchedule schedule_;
};

TEST_F(ErrorFeedbackTest, ResumeReadsTheResidualOfTheCheckpointStep) {
  ErrorFeedback writer(Spec("topk:0.1"), /*rank=*/1, /*world_size=*/2);
  ASSERT_TRUE(writer.Setup(10, schedule_).ok());
  ASSERT_EQ(writer.Of(2, 3).size(), 3u);
  writer.Of(0, 10)[4] = 2.5f;
  ASSERT_TRUE(writer.AfterStep(4).ok());  // not a checkpoint step
  ASSERT_TRUE(writer.AfterStep(5).ok());
  writer.Of(0, 10)[4] = 7.0f;
  ASSERT_TRUE(writer.AfterStep(10).ok());  // step 5's becomes .previous

  TrainingSchedule resume = schedule_;
  resume.resume = true;
  resume.start_step = 5;  // worker 0's checkpoint is of step 5
  ErrorFeedback reader(Spec("topk:0.1"), 1, 2);
  ASSERT_TRUE(reader.Setup(10, resume).ok());
  EXPECT_EQ(reader.residual()[4], 2.5f);
  resume.start_step = 10;
  ASSERT_TRUE(reader.Setup(10, resume).ok());
  EXPECT_EQ(reader.residual()[4], 7.0f);
}

TEST_F(ErrorFeedbackTest, AResidualThatDoesNotBelongIsRefused) {
  ErrorFeedback writer(Spec("onebit"), 1, 2);
  ASSERT_TRUE(writer.Setup(10, schedule_).ok());
  ASSERT_TRUE(writer.AfterStep(5).ok());
  TrainingSchedule resume = schedule_;
  resume.resume = true;
  resume.start_step = 5;

  ErrorFeedback other_method(Spec("topk:0.1"), 1, 2);
  absl::Status status = other_method.Setup(10, resume);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(status.message()), HasSubstr("--compression=onebit"));

  ErrorFeedback other_size(Spec("onebit"), 1, 2);
  EXPECT_FALSE(other_size.Setup(11, resume).ok());

  resume.start_step = 15;
  ErrorFeedback other_step(Spec("onebit"), 1, 2);
  status = other_step.Setup(10, resume);
  EXPECT_THAT(std::string(status.message()), HasSubstr("holds step 5"));

  ErrorFeedback missing(Spec("onebit"), 0, 2);  // rank 0 wrote nothing
  status = missing.Setup(10, resume);
  EXPECT_THAT(std::string(status.message()), HasSubstr("neither exists"));
}

TEST_F(ErrorFeedbackTest, MethodsWithoutResidualKeepNone) {
  ErrorFeedback fp16(Spec("fp16"), 1, 2);
  TrainingSchedule resume = schedule_;
  resume.resume = true;
  resume.start_step = 5;
  ASSERT_TRUE(fp16.Setup(10, resume).ok());  // nothing to read
  EXPECT_TRUE(fp16.Of(0, 10).empty());
  ASSERT_TRUE(fp16.AfterStep(5).ok());
  EXPECT_NE(::access(ErrorFeedback::PathFor(path_, 1).c_str(), F_OK), 0);
}

}  // namespace
}  // namespace gradsync
