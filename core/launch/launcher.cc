#include "core/launch/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "core/base/logging.h"

extern char** environ;

namespace gradsync {
namespace {

constexpr size_t kOutputTail = 256 << 10;
// The event loop's tick: how often we look for exited children and deadlines
// when no output arrives.
constexpr int kPollMillis = 50;

// The signal handler only writes to this pipe; the loop does the rest.
// SIGCHLD only wakes the loop: a child is reaped the moment it exits, so that
// when two fail within one tick (one because of the other), the first is
// the one the job's exit code and message name.
int g_signal_pipe[2] = {-1, -1};
volatile sig_atomic_t g_signal_seen = 0;

// Each signal writes one record: the exited child's pid for SIGCHLD, 0 for
// the others. SIGCHLDs that arrive while one is pending merge into it, and
// the kernel keeps the first one's siginfo: so the first pid read is the
// first child that exited even when the launcher ran too late to see the
// others exit apart (a loaded machine), and it is reaped first.
void OnSignal(int signo, siginfo_t* info, void*) {
  if (signo != SIGCHLD) g_signal_seen = signo;
  const int32_t record =
      signo == SIGCHLD && info != nullptr ? static_cast<int32_t>(info->si_pid)
                                          : 0;
  [[maybe_unused]] ssize_t n =
      write(g_signal_pipe[1], &record, sizeof(record));
}

struct Child {
  pid_t pid = -1;
  int out_fd = -1;  // read end of its stdout+stderr pipe
  FILE* log = nullptr;
  bool running = true;
  std::string partial_line;  // output after the last newline
  ProcessResult result;
};

void AppendTail(std::string& tail, const char* data, size_t n) {
  tail.append(data, n);
  if (tail.size() > kOutputTail) tail.erase(0, tail.size() - kOutputTail);
}

// Builds the child's environment before fork: the child may only call
// async-signal-safe functions, so nothing is allocated after fork.
std::vector<std::string> MergedEnvironment(
    const std::vector<std::pair<std::string, std::string>>& extra) {
  std::map<std::string, std::string> vars;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    vars[std::string(*e, eq - *e)] = eq + 1;
  }
  for (const auto& kv : extra) vars[kv.first] = kv.second;
  std::vector<std::string> out;
  for (const auto& kv : vars) out.push_back(kv.first + "=" + kv.second);
  return out;
}

void EchoLines(Child& child, const char* data, size_t n, bool echo) {
  if (!echo) return;
  child.partial_line.append(data, n);
  size_t start = 0;
  for (size_t nl;
       (nl = child.partial_line.find('\n', start)) != std::string::npos;
       start = nl + 1) {
    std::string line = absl::StrCat(
        "[", child.result.name, "] ",
        absl::string_view(child.partial_line).substr(start, nl + 1 - start));
    fwrite(line.data(), 1, line.size(), stdout);
  }
  child.partial_line.erase(0, start);
  fflush(stdout);
}

void DrainOutput(Child& child, bool echo) {
  char buffer[65536];
  while (child.out_fd >= 0) {
    ssize_t n = read(child.out_fd, buffer, sizeof(buffer));
    if (n > 0) {
      AppendTail(child.result.output, buffer, n);
      if (child.log != nullptr) fwrite(buffer, 1, n, child.log);
      EchoLines(child, buffer, n, echo);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
    // EOF or error: the child closed its end.
    close(child.out_fd);
    child.out_fd = -1;
    if (!child.partial_line.empty()) EchoLines(child, "\n", 1, echo);
  }
}

void SignalAll(std::vector<Child>& children, int signo) {
  for (Child& child : children) {
    // Each child leads its own process group, so its own children get it too.
    if (child.running) kill(-child.pid, signo);
  }
}

// Forks and executes `spec`, its output going to a pipe that `child` reads
// and, when asked, to its log file.
absl::Status StartChild(const ProcessSpec& spec, Child& child) {
  child.result.name = spec.name;
  if (!spec.log_path.empty()) {
    child.log = fopen(spec.log_path.c_str(), "w");
    if (child.log == nullptr) {
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot write log file ", spec.log_path, ": ", std::strerror(errno)));
    }
  }
  std::vector<std::string> env = MergedEnvironment(spec.env);
  std::vector<char*> envp, argv;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = spec.argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  // The child starts with our SIGINT/SIGTERM handler until it resets it: a
  // SIGTERM sent in between (another process failed at once) would only
  // poke our pipe and be lost. Blocked across fork, it waits, and is
  // delivered to the child once the default action is back.
  sigset_t stop_signals, old_mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);
  const pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    setpgid(0, 0);
    // Never outlive the launcher.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  setpgid(pid, pid);  // also from the parent, so kill(-pid) works at once
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  child.pid = pid;
  child.out_fd = fds[0];
  return absl::OkStatus();
}

// If `child` has exited, records how (exit code, signal, when) and returns
// true.
bool ReapIfExited(Child& child) {
  int status = 0;
  if (waitpid(child.pid, &status, WNOHANG) != child.pid) return false;
  child.running = false;
  child.result.ended = absl::Now();
  if (WIFEXITED(status)) {
    child.result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    child.result.term_signal = WTERMSIG(status);
    child.result.exit_code = 128 + WTERMSIG(status);
  }
  return true;
}

}  // namespace

// Long by design: after StartChild, one event loop polls output, the signal
// pipe, exits and the deadline until every child has ended, and those pieces
// share the stop state (stop_all, kill_at), which splitting would scatter.
absl::StatusOr<LaunchResult> RunProcessGroup(
    const std::vector<ProcessSpec>& specs, const LaunchOptions& options) {
  if (specs.empty())
    return absl::InvalidArgumentError("no processes to launch");
  for (const ProcessSpec& spec : specs) {
    if (spec.argv.empty() || access(spec.argv[0].c_str(), X_OK) != 0) {
      return absl::NotFoundError(
          absl::StrCat("cannot launch ", spec.name, ": '",
                       spec.argv.empty() ? "" : spec.argv[0],
                       "' is not an executable file"));
    }
  }
  if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  g_signal_seen = 0;
  struct sigaction action = {}, old_int = {}, old_term = {}, old_chld = {};
  action.sa_sigaction = OnSignal;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, &old_int);
  sigaction(SIGTERM, &action, &old_term);
  action.sa_flags = SA_SIGINFO | SA_NOCLDSTOP | SA_RESTART;
  sigaction(SIGCHLD, &action, &old_chld);

  std::vector<Child> children(specs.size());
  absl::Status start_status;
  for (size_t i = 0; i < specs.size(); ++i) {
    start_status = StartChild(specs[i], children[i]);
    if (!start_status.ok()) {
      // This one never ran; the started ones' logs are closed at the end.
      if (children[i].log != nullptr) fclose(children[i].log);
      children.resize(i);
      break;
    }
    // SIGINT/SIGTERM while starting: start no more. The byte in the signal
    // pipe makes the loop below stop the ones already running.
    if (g_signal_seen != 0) {
      children.resize(i + 1);
      break;
    }
  }

  LaunchResult result;
  const absl::Time deadline = options.deadline == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + options.deadline;
  absl::Time kill_at =
      absl::InfiniteFuture();  // SIGKILL after the grace period
  bool stopping = false;
  auto stop_all = [&](int exit_code, std::string why) {
    if (stopping) return;
    stopping = true;
    result.exit_code = exit_code;
    result.failure = std::move(why);
    for (Child& child : children) {
      if (child.running) child.result.stopped_by_launcher = true;
    }
    SignalAll(children, SIGTERM);
    kill_at = absl::Now() + options.grace;
  };
  if (!start_status.ok()) stop_all(1, std::string(start_status.message()));
  if (start_status.ok() && options.on_started) {
    std::vector<pid_t> pids;
    for (const Child& child : children) pids.push_back(child.pid);
    options.on_started(pids);
  }

  size_t running = children.size();
  while (running > 0 ||
         std::any_of(children.begin(), children.end(),
                     [](const Child& c) { return c.out_fd >= 0; })) {
    std::vector<pollfd> fds;
    std::vector<Child*> owners;
    for (Child& child : children) {
      if (child.out_fd >= 0) {
        fds.push_back({child.out_fd, POLLIN, 0});
        owners.push_back(&child);
      }
    }
    fds.push_back({g_signal_pipe[0], POLLIN, 0});
    poll(fds.data(), fds.size(), kPollMillis);
    for (size_t i = 0; i < owners.size(); ++i) {
      if (fds[i].revents != 0) DrainOutput(*owners[i], options.echo);
    }
    // The children the signal records name, in the order they exited.
    std::vector<pid_t> exited_first;
    if (fds.back().revents != 0) {
      int32_t records[64];
      ssize_t got;
      while ((got = read(g_signal_pipe[0], records, sizeof(records))) > 0) {
        for (ssize_t i = 0; i < got / static_cast<ssize_t>(sizeof(int32_t));
             ++i) {
          if (records[i] > 0) exited_first.push_back(records[i]);
        }
      }
      const int signo = g_signal_seen;
      if (signo != 0) {
        stop_all(128 + signo, absl::StrCat("launcher received signal ", signo,
                                           "; stopping every process"));
      }
    }
    // Reap whoever has exited: those the signals named first, in their
    // order, so the job's exit code and message name the first failure.
    std::vector<Child*> reap_order;
    for (pid_t pid : exited_first) {
      for (Child& child : children) {
        if (child.pid == pid) reap_order.push_back(&child);
      }
    }
    for (Child& child : children) reap_order.push_back(&child);
    for (Child* reaped : reap_order) {
      Child& child = *reaped;
      if (!child.running || !ReapIfExited(child)) continue;
      --running;
      if (child.result.exit_code != 0 && !child.result.stopped_by_launcher &&
          result.failure.empty()) {
        const std::string why =
            child.result.term_signal != 0
                ? absl::StrCat(child.result.name, " was killed by signal ",
                               child.result.term_signal)
                : absl::StrCat(child.result.name, " exited with code ",
                               child.result.exit_code);
        if (!options.stop_on_failure) {
          result.exit_code = child.result.exit_code;
          result.failure = why;
          continue;
        }
        stop_all(child.result.exit_code, why);
      } else if (child.result.exit_code == 0 && options.on_clean_exit &&
                 !child.result.stopped_by_launcher && result.failure.empty()) {
        const int index = static_cast<int>(&child - children.data());
        std::string why = options.on_clean_exit(index);
        if (why.empty()) continue;
        if (!options.stop_on_failure) {
          result.exit_code = 1;
          result.failure = std::move(why);
          continue;
        }
        stop_all(1, std::move(why));
      }
    }
    if (options.on_tick && running > 0 && !stopping && result.failure.empty()) {
      if (std::string why = options.on_tick(); !why.empty()) {
        if (options.stop_on_failure) {
          stop_all(1, std::move(why));
        } else {
          result.exit_code = 1;
          result.failure = std::move(why);
        }
      }
    }
    const absl::Time now = absl::Now();
    if (running > 0 && now >= deadline && !stopping) {
      std::vector<std::string> still;
      for (const Child& child : children) {
        if (child.running) still.push_back(child.result.name);
      }
      stop_all(124, absl::StrCat("job deadline of ",
                                 absl::FormatDuration(options.deadline),
                                 " passed with ", absl::StrJoin(still, ", "),
                                 " still running"));
    }
    if (running > 0 && now >= kill_at) {
      SignalAll(children, SIGKILL);
      kill_at = absl::InfiniteFuture();
    }
  }

  for (Child& child : children) {
    if (child.log != nullptr) fclose(child.log);
    result.processes.push_back(std::move(child.result));
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  sigaction(SIGCHLD, &old_chld, nullptr);
  close(g_signal_pipe[0]);
  close(g_signal_pipe[1]);
  g_signal_pipe[0] = g_signal_pipe[1] = -1;
  if (!start_status.ok() && result.processes.empty()) return start_status;
  return result;
}

namespace {

// Binds `port` (0: any) on every address, exclusively, and returns the socket
// with the bound port, or -1. SO_REUSEADDR is set only after the bind: the
// port is then taken for every other exclusive bind (another PickFreePort)
// while a listener that sets SO_REUSEADDR itself (gRPC, torch's store) may
// still bind and listen on it.
int BindExclusively(int port, int* bound_port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(addr);
  const int one = 1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
    close(fd);
    return -1;
  }
  *bound_port = ntohs(addr.sin_port);
  return fd;
}

// Where the kernel's range of ephemeral ports starts.
int FirstEphemeralPort() {
  FILE* file = std::fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
  int low = 32768, high = 60999;
  if (file != nullptr) {
    if (std::fscanf(file, "%d %d", &low, &high) != 2) low = 32768;
    std::fclose(file);
  }
  return low;
}

// The sockets that hold the ports PickFreePort gave; never closed, so the
// ports stay reserved until this process exits.
absl::Mutex g_reserved_mutex(absl::kConstInit);
std::vector<int>* g_reserved_ports ABSL_GUARDED_BY(g_reserved_mutex) = nullptr;

}  // namespace

absl::StatusOr<int> PickFreePort() {
  // The port is bound only later, by another process. Meanwhile it must be
  // taken neither by an outgoing connection (so it is picked below the
  // kernel's ephemeral range when there is room) nor by another picker on
  // the machine (tests and jobs start beside each other), so it stays bound
  // here, non-exclusively, until this process exits.
  const int low = FirstEphemeralPort();
  constexpr int kFirst = 10000;
  int port = 0;
  int fd = -1;
  if (low - kFirst >= 1000) {
    std::random_device random;
    for (int attempt = 0; attempt < 64 && fd < 0; ++attempt) {
      fd = BindExclusively(kFirst + static_cast<int>(random() % (low - kFirst)),
                           &port);
    }
  }
  if (fd < 0) fd = BindExclusively(0, &port);
  if (fd < 0) {
    return absl::InternalError(
        absl::StrCat("picking a free port: ", std::strerror(errno)));
  }
  absl::MutexLock lock(&g_reserved_mutex);
  if (g_reserved_ports == nullptr) g_reserved_ports = new std::vector<int>();
  g_reserved_ports->push_back(fd);
  return port;
}

}  // namespace gradsync
