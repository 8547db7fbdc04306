// The SyncContext of one rank of a TransportTestCluster: what the sync
// layer's tests hand GradientSyncRegistry::Create, so that every test joins
// its in-memory job the same way.
#pragma once

#include "absl/time/time.h"
#include "allreduce/transport/test_cluster.h"
#include "core/sync/gradient_sync.h"

namespace gradsync {

inline SyncContext TestSyncContext(TransportTestCluster& cluster, int rank,
                                   absl::Duration timeout) {
  SyncContext context;
  context.identity.rank = rank;
  context.identity.world_size = cluster.world_size();
  context.identity.job_id = cluster.job_id();
  context.rendezvous = cluster.client(rank);
  context.identity.advertise_host = "127.0.0.1";
  context.timeout = timeout;
  return context;
}

}  // namespace gradsync
