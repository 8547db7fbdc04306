// --sync=ps: the parameter-server strategy behind the GradientSync seam.
//
// Setup partitions the layout's parameters into keys over the K servers and
// registers with them; BucketReady starts the bucket's pushes and pulls and
// returns; Finish waits for them and leaves the averaged gradients in the
// gradient buffer (--ps_update=worker) or the servers' new parameters in the
// parameter buffer (--ps_update=server). With --ps_colocate, worker r also
// runs server r in-process (K = N); with --ps_colocated_servers=k, workers
// 0..k-1 do, beside the job's separate servers (K = k + separate).
//
// Compression (SyncContext::compression, ps/key_compression.h): each ready
// bucket is encoded once (error feedback: one residual per float of the
// gradient, kept here across steps) and cut into its keys' encodings; a
// row-sparse bucket (Bucket::sparse_row_width, an embedding table) always
// pushes only its touched rows. The layout may hold only some of a model's
// tensors (--sync=hybrid gives the servers its row-sparse buckets).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/sync/gradient_sync.h"
#include "core/optim/optimizer.h"
#include "proto/parameter_server.pb.h"
#include "ps/consistency.h"
#include "ps/key_compression.h"
#include "ps/client/partitioner.h"
#include "ps/server/shard.h"
#include "ps/stream_window_rule.h"

namespace gradsync {

struct PsSyncOptions {
  ps::UpdateMode update_mode = ps::UPDATE_WORKER;
  int64_t chunk_bytes = int64_t{4} << 20;
  int64_t message_bytes = int64_t{1} << 20;  // 0: auto, from the windows
  int64_t stream_window_bytes = int64_t{4} << 20;
  // A colocated server's bound on its keys (ParameterServerOptions).
  int64_t max_shard_bytes = kDefaultMaxShardBytes;
  // chunk_bytes or stream_window_bytes 0: auto, from the layout and K
  // (ps/key_size_rule.h) or from `link` and the fan-in
  // (ps/stream_window_rule.h), resolved in Setup (ps/settings.h). The edge
  // says what the link is (tools/ps_flags.h: the one `gradsync launch
  // --netem` emulates); nothing here reads the environment.
  LinkFigures link;
  // Server mode: the workers' optimizer, with the learning rate already
  // scaled for the world size (SyncContext::optimizer).
  OptimizerOptions optimizer;
  // Worker r < colocated_servers runs server r in-process; the job's
  // separate servers follow as servers colocated_servers..K-1. `colocate`:
  // every worker (colocated_servers = N), and no separate servers.
  bool colocate = false;
  int colocated_servers = 0;
  // How the keys' bytes are shared among the servers (--ps_partition):
  // equal, or balanced for the layout (ServerShares in
  // ps/client/partitioner.h).
  PartitionPolicy partition = PartitionPolicy::kEqual;
  // --ps_consistency / --ps_staleness (server mode only for SSP and ASP).
  ConsistencyOptions consistency;
  // --ps_pull: what results travel as under --compression
  // (ps/key_compression.h); auto resolves from SyncContext::compression.
  PsPull pull = PsPull::kAuto;
  // The separate servers' "host:port", in order. Empty: taken from
  // SyncContext::members (role kServer). Colocated ones come from the
  // rendezvous.
  std::vector<std::string> server_addresses;
};

// The strategy with `options` (the edge, tools/ps_flags.h, registers it as
// --sync=ps from the --ps_* flags). Refuses contradictory options at once.
absl::StatusOr<std::unique_ptr<GradientSync>> CreatePsSync(
    const SyncContext& context, const PsSyncOptions& options);

}  // namespace gradsync
