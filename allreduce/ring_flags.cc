#include "allreduce/ring_flags.h"

#include "absl/flags/flag.h"

// 256 KiB keeps the staging chunk (and the destination slice it is added into)
// in L2 while the kernel receives the next one, and still makes each send or
// receive call move enough to amortise the system call; see
// bench/allreduce_benchmark.cc for the measurements behind it.
ABSL_FLAG(int, ring_chunk_kb, 256,
          "ring all-reduce pipeline chunk in KiB: the most bytes one send or "
          "receive call moves, and the size of the receive staging buffer "
          "that is reduced while the next chunk arrives (min 4)");

// A ring step streams a whole segment; buffers this large let a sender run
// ahead of a receiver that is busy reducing. Linux caps the request at
// net.core.wmem_max/rmem_max (a warning says when it did).
ABSL_FLAG(int, ring_socket_buffer_kb, 4096,
          "SO_SNDBUF/SO_RCVBUF of each ring connection in KiB; 0 keeps the "
          "kernel's TCP buffer autotuning");
