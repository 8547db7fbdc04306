// A parameter server: one shard of the keys (ps/server/shard.h) behind the gRPC
// service of proto/parameter_server.proto. Runs in its own process
// (`gradsync server`, ps/server_command.h), inside a worker (--ps_colocate)
// or as a thread of a test or benchmark; it is the same object everywhere.
//
// The service uses gRPC's callback API: a pull that waits for slow workers
// holds no thread, and a push is summed on whichever gRPC thread read it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/telemetry/trace.h"
#include "ps/server/shard.h"

namespace gradsync {

class ServerShard;

struct ParameterServerOptions {
  std::string job_id = "gradsync";
  int server_rank = 0;
  int num_servers = 1;
  int num_workers = 1;
  // "0.0.0.0:0" for every interface; port 0 picks a free port.
  std::string bind_address = "127.0.0.1:0";
  // Largest payload of one pull message (--ps_message_kb).
  int64_t message_bytes = int64_t{1} << 20;
  // HTTP/2 window of the push streams (--ps_stream_window_kb); 0: gRPC's
  // default with BDP probing.
  int64_t stream_window_bytes = int64_t{4} << 20;
  // With a window: keep gRPC's BDP probing on anyway (the rule's choice where
  // the link's bandwidth-delay product exceeds the connection's fixed 64 KiB
  // window, ps/stream_window_rule.h); the window is then only the start.
  bool bdp_probe = false;
  // The most bytes of keys workers may register here (--ps_max_shard_mb).
  int64_t max_shard_bytes = kDefaultMaxShardBytes;
  // A pull whose caller set no deadline waits at most this long.
  absl::Duration max_wait = absl::Minutes(10);
  // --trace: where the server records, per key, worker and step, when a
  // push arrived and when its result left (not owned; it must outlive the
  // server). Null: nothing is recorded, at the cost of one test per message.
  TraceRecorder* trace = nullptr;
  // Instead: record into CurrentTrace() whenever one is published (a
  // colocated server, into its worker's timeline).
  bool trace_into_current = false;
  // Steps recorded, counted from the first this server sees; < 0: all.
  int64_t trace_steps = -1;
  // The file `trace` is written to when the last worker has shut down, and
  // again at Stop, named in the summary as "trace_file" for worker 0 to
  // merge. Empty: the owner writes it.
  std::string trace_path;
};

class ParameterServer {
 public:
  static absl::StatusOr<std::unique_ptr<ParameterServer>> Start(
      const ParameterServerOptions& options);
  // Stops serving if Stop() was not called.
  ~ParameterServer();

  int port() const;
  // "server 1".
  const std::string& name() const;

  // Blocks until every worker has sent Shutdown (OK), or until no worker has
  // called this server for `idle_timeout` (DeadlineExceeded naming the
  // workers that never said the job was over: they are gone).
  absl::Status WaitForShutdown(absl::Duration idle_timeout);
  // Makes WaitForShutdown return `why` now (the job lost a member, so the
  // workers will never finish); the first reason stays. Thread-safe.
  void Abort(const absl::Status& why);
  // Stops serving: calls in flight are cancelled. Idempotent.
  void Stop();

  // {"server": k, "bytes_in": ..., ...}; see ServerShard::SummaryJson.
  std::string SummaryJson() const;
  // The shard, for tests that check what a failed call left behind.
  const ServerShard& shard() const;

 private:
  class Impl;
  explicit ParameterServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradsync
