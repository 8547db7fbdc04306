// `gradsync server`: one parameter-server process. Reads the --ps_* flags and
// the environment (core/cluster/cluster_env.h: GRADSYNC_ROLE=server,
// GRADSYNC_SERVER_RANK, GRADSYNC_NUM_SERVERS, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, GRADSYNC_JOB_ID), serves its shard on a free port, joins the
// coordinator with that address, and serves until every worker has sent
// Shutdown. Prints its summary as one JSON line on stdout at exit.
#pragma once

namespace gradsync {

// Returns the process exit code: 0 when every worker said the job was over;
// 1 with an error naming the missing workers when they went away (no call for
// --ps_idle_timeout_s), or when start-up failed.
int RunServerCommand();

}  // namespace gradsync
