// A deadline on a stretch of work that cannot time out by itself: reading a
// file that blocks (a FIFO, a hung network mount) blocks in open(2) or
// read(2) forever, and no --timeout_s reaches inside. An ActivityDeadline
// watches from a thread of its own and, if the work is still going when the
// deadline passes, calls its handler with what the process was blocked on
// (the last NoteBlockingOn), e.g. to report the error and end the process —
// the only way out of a blocked system call.
#pragma once

#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gradsync {

// Says what this process is about to block on ("reading /data/x.gz"), for
// the message of an expired ActivityDeadline. Cheap; any thread.
void NoteBlockingOn(std::string what);
// The last note, or "" when none was made.
std::string BlockingOn();

class ActivityDeadline {
 public:
  // Calls `on_expiry(BlockingOn())` from the watching thread once `limit`
  // has passed, unless destroyed first. `on_expiry` may end the process.
  ActivityDeadline(absl::Duration limit,
                   std::function<void(const std::string&)> on_expiry);
  // Ends the watch; waits for a handler already running.
  ~ActivityDeadline();

  ActivityDeadline(const ActivityDeadline&) = delete;
  ActivityDeadline& operator=(const ActivityDeadline&) = delete;

 private:
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watcher_;
};

}  // namespace gradsync
