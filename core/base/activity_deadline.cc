#include "core/base/activity_deadline.h"

#include <utility>

namespace gradsync {
namespace {

absl::Mutex& NoteMutex() {
  static absl::Mutex* mu = new absl::Mutex;
  return *mu;
}

std::string& Note() {
  static std::string* note = new std::string;
  return *note;
}

}  // namespace

void NoteBlockingOn(std::string what) {
  absl::MutexLock lock(&NoteMutex());
  Note() = std::move(what);
}

std::string BlockingOn() {
  absl::MutexLock lock(&NoteMutex());
  return Note();
}

ActivityDeadline::ActivityDeadline(
    absl::Duration limit, std::function<void(const std::string&)> on_expiry) {
  watcher_ = std::thread([this, limit, on_expiry = std::move(on_expiry)] {
    {
      absl::MutexLock lock(&mu_);
      if (mu_.AwaitWithTimeout(absl::Condition(&done_), limit)) return;
    }
    on_expiry(BlockingOn());
  });
}

ActivityDeadline::~ActivityDeadline() {
  {
    absl::MutexLock lock(&mu_);
    done_ = true;
  }
  watcher_.join();
}

}  // namespace gradsync
