// The rule that chooses --credit_kb's "auto" for the parameter server under
// --schedule=priority: how many bytes of keys a worker keeps in flight per
// server and direction (ps/client/send_queue.h). A rule, not a flag: it links
// no flag library, and every worker derives the same value from the key size
// and the stream window (ps/stream_window_rule.h), so nothing is broadcast.
//
// The credit trades two things. Every byte in flight is a byte a late,
// sooner-needed key waits behind (a queued key overtakes only what has not
// left yet; the keys already in flight share the link with it), so it
// should be small. But a key's credit comes back only when the server
// acknowledges it, so the keys in flight must cover the link's round trip
// or the link idles after every key. The two directions differ:
//
//   - push: the push stream window, at least one key. The window (the
//     stream-window rule: 2 × the stream's share of the bandwidth-delay
//     product, at least 32 KiB) already holds the round trip's bytes twice
//     over; one key always goes. A worker pushes to all K servers over its
//     one uplink, so a late first-layer key shares that uplink with K
//     credits' worth of keys: anything past the round trip only delays it.
//   - pull: the larger of kCreditKeys keys (ByteScheduler's PS default,
//     SOSP'19: 4 partitions) and one key + the pull stream window. A pull
//     is answered only once every worker's push of its key has arrived, so
//     pulls in flight often wait on another worker and move no bytes; a
//     credit of one key would idle the downlink behind them.
//
// Where the link is not known the window is the 4 MiB default and the
// credit large: without a link to pace, ordering matters less than keeping
// the pipe full.
//
//   push credit = max(key, push window)
//   pull credit = max(kCreditKeys × key, key + pull window)   per server
//
// ByteScheduler searches its credit by Bayesian optimisation at run time;
// here it is derived once, at start-up, like the key size.
#pragma once

#include <cstdint>
#include <string>

namespace gradsync {

constexpr int64_t kCreditKeys = 4;

struct CreditChoice {
  int64_t credit_bytes = 0;
  std::string reason;  // one line, for the log and the manifest
};

enum class CreditDirection { kPush, kPull };

// `key_bytes`: the largest key (--ps_chunk_kb resolved); `window_bytes`: the
// stream window of that direction.
CreditChoice ChooseCredit(int64_t key_bytes, int64_t window_bytes,
                          CreditDirection direction);

}  // namespace gradsync
