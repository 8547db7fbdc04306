// An ActivityDeadline calls its handler with the last note once its limit
// passes, and never when the work ends first.
#include "core/base/activity_deadline.h"

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace gradsync {
namespace {

TEST(ActivityDeadlineTest, ExpiryNamesWhatTheProcessWasBlockedOn) {
  absl::Notification expired;
  std::string what;
  NoteBlockingOn("reading /data/train-images.gz");
  {
    ActivityDeadline deadline(absl::Milliseconds(10),
                              [&](const std::string& blocked) {
                                what = blocked;
                                expired.Notify();
                              });
    // The work "blocks" until the handler has run.
    ASSERT_TRUE(expired.WaitForNotificationWithTimeout(absl::Seconds(60)));
  }
  EXPECT_EQ(what, "reading /data/train-images.gz");
}

TEST(ActivityDeadlineTest, WorkThatEndsInTimeIsNeverReported) {
  bool called = false;
  {
    ActivityDeadline deadline(absl::Hours(1),
                              [&](const std::string&) { called = true; });
  }
  EXPECT_FALSE(called);
}

}  // namespace
}  // namespace gradsync
