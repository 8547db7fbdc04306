// Soak: a long job on this machine — N workers, K parameter servers, tens of
// thousands of steps of a small model — with the resident memory (VmRSS) of
// every process sampled ten times a second. Memory that is still growing after
// warm-up is a leak or an unbounded buffer; the run fails when any process's
// RSS at the end differs from its RSS after warm-up by more than
// --tolerance (5%).
//
//   bazel build //tools:gradsync //bench:soak
//   bazel-bin/bench/soak --sync=ring --workers=8 --steps=20000
//   bazel-bin/bench/soak --sync=ps --workers=8 --servers=2 --steps=20000
//   bazel-bin/bench/soak --sync=ps --ps_update=server --workers=8 --servers=2
//
// Prints one row per process (RSS after warm-up, peak, at the end, change)
// and, with --json, writes the same as JSON. Warm-up is over when worker 0
// has written --warmup_steps step records; "the end" is the last sample
// taken while worker 0 was between 95% and 98% of the steps: late in the run,
// but with every process still in its step loop (a sample taken while a
// process exits sees its memory already being unmapped).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "core/launch/launcher.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, gradsync, "bazel-bin/tools/gradsync",
          "the gradsync binary");
ABSL_FLAG(std::string, sync, "ring", "strategy: ring or ps");
ABSL_FLAG(int, workers, 8, "worker processes");
ABSL_FLAG(int, servers, 2, "parameter servers (--sync=ps only)");
ABSL_FLAG(std::string, ps_update, "worker",
          "--sync=ps only: where the optimizer runs, worker or server");
ABSL_FLAG(int64_t, steps, 20000, "training steps");
ABSL_FLAG(int64_t, warmup_steps, 2000,
          "steps after which the reference RSS is taken");
ABSL_FLAG(double, tolerance, 0.05,
          "largest accepted relative change of RSS from warm-up to the end");
ABSL_FLAG(std::string, layers, "64,32,10", "the model (--layers of gradsync)");
ABSL_FLAG(std::string, run_dir, "/tmp/gradsync-soak", "logs and metrics");
ABSL_FLAG(std::string, json, "", "also write the results here");
ABSL_FLAG(double, deadline_s, 3600, "stop the job after this long");

namespace gradsync {
namespace {

// VmRSS of `pid` in KiB, or -1 once it is gone.
int64_t ResidentKib(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmRSS:", 0) != 0) continue;
    int64_t kib = -1;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits.push_back(c);
    }
    return absl::SimpleAtoi(digits, &kib) ? kib : -1;
  }
  return -1;
}

// Counts lines appended to a file since the last call.
class LineCounter {
 public:
  explicit LineCounter(std::string path) : path_(std::move(path)) {}
  int64_t Count() {
    std::ifstream in(path_, std::ios::binary);
    if (!in) return lines_;
    in.seekg(offset_);
    char buffer[1 << 16];
    while (in.read(buffer, sizeof(buffer)) || in.gcount() > 0) {
      const std::streamsize n = in.gcount();
      for (std::streamsize i = 0; i < n; ++i) lines_ += buffer[i] == '\n';
      offset_ += n;
    }
    return lines_;
  }

 private:
  const std::string path_;
  std::streamoff offset_ = 0;
  int64_t lines_ = 0;
};

struct Track {
  std::string name;
  int64_t warm_kib = -1;  // after warm-up
  int64_t last_kib = -1;  // the last sample in the end window
  int64_t peak_kib = 0;
  bool last_is_end = false;  // `last_kib` was taken in the end window
};

int Soak() {
  const std::string sync = absl::GetFlag(FLAGS_sync);
  const int workers = absl::GetFlag(FLAGS_workers);
  const int servers = sync == "ps" ? absl::GetFlag(FLAGS_servers) : 0;
  const int64_t steps = absl::GetFlag(FLAGS_steps);
  const std::string ps_update = absl::GetFlag(FLAGS_ps_update);
  if (sync != "ring" && sync != "ps") {
    std::fprintf(stderr, "soak: unknown --sync=%s; choose ring or ps\n",
                 sync.c_str());
    return 2;
  }
  if (ps_update != "worker" && ps_update != "server") {
    std::fprintf(stderr,
                 "soak: unknown --ps_update=%s; choose worker or server\n",
                 ps_update.c_str());
    return 2;
  }
  const std::string name = sync == "ps" ? absl::StrCat("ps-", ps_update) : sync;
  const std::string dir = absl::StrCat(absl::GetFlag(FLAGS_run_dir), "/", name);
  if (std::system(
          absl::StrCat("rm -rf '", dir, "' && mkdir -p '", dir, "'").c_str()) !=
      0) {
    std::fprintf(stderr, "cannot create %s\n", dir.c_str());
    return 2;
  }
  absl::StatusOr<int> port = PickFreePort();
  if (!port.ok()) {
    std::fprintf(stderr, "%s\n", std::string(port.status().message()).c_str());
    return 2;
  }
  // Enough samples that no worker runs out before --steps (each has
  // synthetic_size / workers per epoch; --max_steps ends the run).
  std::vector<std::string> flags = {
      absl::StrCat("--sync=", sync),
      "--data=synthetic",
      "--synthetic_size=65536",
      absl::StrCat("--layers=", absl::GetFlag(FLAGS_layers)),
      "--batch_size=32",
      "--epochs=100000",
      absl::StrCat("--max_steps=", steps),
      "--eval=false",
      "--progress=false",
      absl::StrCat("--metrics_dir=", dir)};
  if (sync == "ps") flags.push_back(absl::StrCat("--ps_update=", ps_update));
  const std::vector<std::pair<std::string, std::string>> common = {
      {"WORLD_SIZE", absl::StrCat(workers)},
      {"LOCAL_WORLD_SIZE", absl::StrCat(workers + servers)},
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", absl::StrCat(*port)},
      {"GRADSYNC_JOB_ID", absl::StrCat("soak-", name)},
      {"GRADSYNC_JOB_TOKEN", "soak-token-0123456789abcdef"},
      {"GRADSYNC_NUM_SERVERS", absl::StrCat(servers)},
      {"GRADSYNC_LAUNCHER", "1"},
      {"OPENBLAS_NUM_THREADS", "1"},
  };
  std::vector<ProcessSpec> specs;
  for (int r = 0; r < workers + servers; ++r) {
    const bool worker = r < workers;
    const int rank = worker ? r : r - workers;
    ProcessSpec spec;
    spec.name = absl::StrCat(worker ? "worker " : "server ", rank);
    spec.argv = {absl::GetFlag(FLAGS_gradsync), worker ? "train" : "server"};
    spec.argv.insert(spec.argv.end(), flags.begin(), flags.end());
    spec.env = common;
    spec.env.push_back({"RANK", worker ? absl::StrCat(rank) : "0"});
    spec.env.push_back({"LOCAL_RANK", absl::StrCat(r)});
    spec.env.push_back({"GRADSYNC_ROLE", worker ? "worker" : "server"});
    if (!worker)
      spec.env.push_back({"GRADSYNC_SERVER_RANK", absl::StrCat(rank)});
    spec.log_path =
        absl::StrCat(dir, "/", worker ? "worker" : "server", rank, ".log");
    specs.push_back(std::move(spec));
  }

  absl::Mutex mu;
  std::vector<pid_t> pids;
  std::atomic<bool> over{false};
  std::vector<Track> tracks(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) tracks[i].name = specs[i].name;
  const int64_t warmup = absl::GetFlag(FLAGS_warmup_steps);
  const absl::Time start = absl::Now();
  std::thread sampler([&] {
    {
      absl::MutexLock lock(&mu);
      mu.Await(absl::Condition(
          +[](std::vector<pid_t>* p) { return !p->empty(); }, &pids));
    }
    LineCounter progress(absl::StrCat(dir, "/worker0.jsonl"));
    while (!over) {
      const int64_t done = progress.Count();  // step records (+ epoch lines)
      for (size_t i = 0; i < pids.size(); ++i) {
        const int64_t kib = ResidentKib(pids[i]);
        if (kib < 0) continue;
        Track& track = tracks[i];
        track.peak_kib = std::max(track.peak_kib, kib);
        if (done >= warmup && track.warm_kib < 0) track.warm_kib = kib;
        if (done >= steps * 95 / 100 && done <= steps * 98 / 100) {
          track.last_kib = kib;
          track.last_is_end = true;
        }
      }
      absl::SleepFor(absl::Milliseconds(100));
    }
  });
  LaunchOptions options;
  options.echo = false;
  options.deadline = absl::Seconds(absl::GetFlag(FLAGS_deadline_s));
  options.on_started = [&](const std::vector<pid_t>& started) {
    absl::MutexLock lock(&mu);
    pids = started;
  };
  absl::StatusOr<LaunchResult> result = RunProcessGroup(specs, options);
  over = true;
  sampler.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  if (!result.ok()) {
    std::fprintf(stderr, "%s\n",
                 std::string(result.status().message()).c_str());
    return 2;
  }

  const double tolerance = absl::GetFlag(FLAGS_tolerance);
  bool ok = result->exit_code == 0;
  const std::string mode =
      sync == "ps" ? absl::StrCat(" --ps_update=", ps_update) : "";
  std::printf(
      "soak --sync=%s%s: %d workers, %d servers, %lld steps in %.0f s (%.2f "
      "ms/step), job exit %d%s\n",
      sync.c_str(), mode.c_str(), workers, servers,
      static_cast<long long>(steps), seconds, 1000 * seconds / steps,
      result->exit_code,
      result->exit_code == 0
          ? ""
          : absl::StrCat(" (", result->failure, ")").c_str());
  std::printf("%-10s %14s %14s %14s %9s\n", "process", "RSS warm KiB",
              "RSS peak KiB", "RSS end KiB", "change");
  nlohmann::json rows = nlohmann::json::array();
  for (const Track& track : tracks) {
    const bool measured = track.warm_kib > 0 && track.last_is_end;
    const double change =
        measured ? static_cast<double>(track.last_kib - track.warm_kib) /
                       track.warm_kib
                 : 0;
    const bool within = measured && std::abs(change) <= tolerance;
    ok = ok && within;
    std::printf("%-10s %14lld %14lld %14lld %+8.2f%%%s\n", track.name.c_str(),
                static_cast<long long>(track.warm_kib),
                static_cast<long long>(track.peak_kib),
                static_cast<long long>(track.last_kib), 100 * change,
                measured ? (within ? "" : "  OVER") : "  (not measured)");
    rows.push_back({{"process", track.name},
                    {"rss_warm_kib", track.warm_kib},
                    {"rss_peak_kib", track.peak_kib},
                    {"rss_end_kib", track.last_kib},
                    {"change", change},
                    {"within", within}});
  }
  std::printf("%s\n", ok ? "PASS: every process within tolerance" : "FAIL");
  const std::string json = absl::GetFlag(FLAGS_json);
  if (!json.empty()) {
    const nlohmann::json report = {
        {"sync", sync},       {"ps_update", sync == "ps" ? ps_update : ""},
        {"workers", workers}, {"servers", servers},
        {"steps", steps},     {"warmup_steps", warmup},
        {"seconds", seconds}, {"tolerance", tolerance},
        {"ok", ok},           {"processes", rows},
    };
    std::ofstream(json) << report.dump(1, ' ', false,
                                       nlohmann::json::error_handler_t::replace)
                        << "\n";
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace gradsync

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return gradsync::Soak();
}
