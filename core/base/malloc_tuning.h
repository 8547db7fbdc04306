// glibc's malloc tuned for a process that streams large messages.
//
// gRPC allocates its receive buffers and messages per read, many of them
// hundreds of KiB to a few MiB. With glibc's defaults those come from mmap or
// from heap tops that free() hands back to the kernel (trimming), so the next
// step touches fresh pages again: a page fault per 4 KiB received. Keeping
// freed memory roughly halves a PS job's page faults and cuts its CPU time by
// a quarter; the ring, which receives into buffers it keeps, is unchanged
// (docs/results/performance.md, "Notes from the code").
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
