// One rank of //allreduce:ring_multiprocess_test's ring check: reads who it
// is from the environment (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT/
// GRADSYNC_JOB_ID, see core/cluster/cluster_env.h), hosts the coordinator if
// it is rank 0, builds the ring and all-reduces integer-valued buffers of
// awkward sizes, checking every element exactly. Exits 0 when all sums are
// exact, 1 otherwise.
//
//   RANK=0 WORLD_SIZE=2 MASTER_PORT=29500 ring_check_main &
//   RANK=1 WORLD_SIZE=2 MASTER_PORT=29500 ring_check_main
//
// --depart_rank=k makes rank k leave in the middle of the largest all-reduce
// (it passes 1 MiB along the ring, then closes its connections and exits 0),
// to check that the others fail promptly with an error naming it.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "allreduce/algorithms/ring_allreduce.h"
#include "allreduce/allreduce_flags.h"
#include "allreduce/transport/peer_transport.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/cluster/cluster_env.h"
#include "core/cluster/coordinator.h"
#include "tools/cluster_flags.h"

// --timeout_s is tools/cluster_flags.cc's, as `gradsync train` reads it.
ABSL_FLAG(int, depart_rank, -1,
          "testing: this rank leaves in the middle of the largest all-reduce");

namespace gradsync {
namespace {

constexpr int64_t kLargeCount = (1 << 20) + 3;

float InputValue(int rank, int64_t i) {
  return static_cast<float>((i * 7 + rank * 13) % 23 - 11);
}

// Passes `bytes` from the left neighbour to the right one, as if taking part,
// then closes both connections.
absl::Status Depart(PeerTransport& transport, int64_t bytes) {
  const absl::Time deadline = absl::Now() + transport.timeout();
  std::vector<char> buffer(bytes);
  RETURN_IF_ERROR(transport.left().RecvAll(buffer.data(), bytes, deadline));
  RETURN_IF_ERROR(transport.right().SendAll(buffer.data(), bytes, deadline));
  transport.Close();
  return absl::OkStatus();
}

absl::Status Check(const ClusterEnv& env) {
  ASSIGN_OR_RETURN(const absl::Duration timeout, PeerTimeoutFromFlags());
  const int n = env.world_size;
  CoordinatorClientOptions client_options;
  ASSIGN_OR_RETURN(client_options.security, CoordinatorSecurityFromFlags());
  std::unique_ptr<CoordinatorServer> server;
  if (env.rank == 0) {
    ASSIGN_OR_RETURN(server, CoordinatorServer::Start(
                                 ApplyBindFlag(env.coordinator_target()),
                                 env.job_id, n, 0, client_options.security));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> coordinator,
                   CoordinatorClient::Connect(
                       env.coordinator_target(), env.job_id, Role::kWorker,
                       env.rank, timeout, client_options));
  PeerTransportOptions options;
  options.rank = env.rank;
  options.world_size = n;
  options.job_id = coordinator->job_id();  // worker 0's, if none was given
  options.advertise_host = "127.0.0.1";
  options.timeout = timeout;
  const AllReduceFlagValues flags = ReadAllReduceFlags();
  options.socket_buffer_bytes = flags.socket_buffer_bytes;
  ASSIGN_OR_RETURN(std::unique_ptr<PeerTransport> transport,
                   PeerTransport::Create(options, coordinator.get()));
  RingAllReduce ring(transport.get(), flags.chunk_bytes);

  const std::vector<int64_t> counts = {0, 1, n - 1, n + 1, kLargeCount};
  for (int64_t count : counts) {
    if (count == kLargeCount && env.rank == absl::GetFlag(FLAGS_depart_rank)) {
      GS_LOG(INFO) << "ring check: rank " << env.rank
                   << " departs in the middle of the all-reduce of " << count
                   << " floats";
      return Depart(*transport, RingAllReduce::kHeaderBytes + (1 << 20));
    }
    std::vector<float> data(count);
    for (int64_t i = 0; i < count; ++i) data[i] = InputValue(env.rank, i);
    RETURN_IF_ERROR(ring.Run(data.data(), count));
    for (int64_t i = 0; i < count; ++i) {
      int sum = 0;
      for (int r = 0; r < n; ++r) sum += static_cast<int>(InputValue(r, i));
      if (data[i] != static_cast<float>(sum)) {
        return absl::DataLossError(absl::StrCat(
            "ring check: rank ", env.rank, ": all-reduce of ", count,
            " floats: element ", i, " is ", data[i], ", the sum is ", sum));
      }
    }
  }
  // Rank 0 hosts the coordinator: nobody leaves before everyone is done.
  RETURN_IF_ERROR(
      coordinator->Barrier("ring-check-done", BarrierGroup::kWorkers, timeout));
  std::printf(
      "ring check: rank %d of %d: all-reduces of %s floats exact, "
      "%lld bytes sent, %lld received\n",
      env.rank, n, absl::StrJoin(counts, ", ").c_str(),
      static_cast<long long>(ring.bytes_sent()),
      static_cast<long long>(ring.bytes_received()));
  return absl::OkStatus();
}

}  // namespace
}  // namespace gradsync

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Checks the ring all-reduce across processes; rank and world from the "
      "environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).");
  absl::ParseCommandLine(argc, argv);
  absl::StatusOr<gradsync::ClusterEnv> env =
      gradsync::ClusterEnvFromEnvironment();
  if (!env.ok()) {
    GS_LOG(ERROR) << env.status();
    return 1;
  }
  gradsync::SetLogTag(absl::StrCat("worker ", env->rank));
  absl::Status status = gradsync::Check(*env);
  if (!status.ok()) {
    GS_LOG(ERROR) << status;
    return 1;
  }
  return 0;
}
