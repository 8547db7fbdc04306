// glibc's malloc tuned for a process that streams large messages.
//
// gRPC allocates its receive buffers and messages per read, many of them
// hundreds of KiB to a few MiB. With glibc's defaults those come from mmap or
// from heap tops that free() hands back to the kernel (trimming), so the next
// step touches fresh pages again: a page fault per 4 KiB received. Measured
// on a loopback job (N = 4 workers, K = 4 servers, 25 MB gradient, 40 steps,
// user+sys of the whole job): 663,000 page faults and 24 CPU-s by default,
// 351,000-364,000 and 17-18 CPU-s with freed memory kept for reuse, most of
// the rest at start-up (80 steps add only ~35,000). The ring, which receives
// into buffers it keeps, has 171,000 either way.
//
// So every gradsync process keeps what it frees (up to 1 GiB above the heap's
// high-water mark is never trimmed) and serves blocks up to 32 MiB from the
// heap rather than mmap. The cost is that resident memory stays at its peak,
// which for a training process it does anyway. An explicit
// GLIBC_TUNABLES=glibc.malloc.* in the environment wins: nothing is changed.
#pragma once

namespace gradsync {

// Call first thing in main(), before threads start allocating.
void KeepFreedMemoryForReuse();

}  // namespace gradsync
