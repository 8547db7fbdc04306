// The rule that chooses --credit_kb's "auto" for the parameter server under
// --schedule=priority: how many bytes of keys a worker keeps in flight per
// server and direction (ps/client/send_queue.h). A rule, not a flag: it links
// no flag library, and every worker derives the same value from the key size
// and the stream window (ps/stream_window_rule.h), so nothing is broadcast.
//
// The credit trades two things. Every byte in flight is a byte a late,
// sooner-needed key waits behind (a queued key overtakes only what has not
// left yet), so it should be small. But a key's credit comes back only when
// the server acknowledges it, a round trip after its last byte left, and on
// a busy host that round trip is the software's (gRPC's threads waking up)
// as much as the link's: with too few keys in flight the link idles after
// every key, and for pulls the next request reaches the server only after
// the previous result is in. So the credit is the larger of
//
//   - kCreditKeys keys (ByteScheduler's PS default, SOSP'19: a credit of 4
//     partitions): one being written while the others' acknowledgements
//     (or, for pulls, the next requests) are on their way;
//   - one key + the stream's window, which the stream-window rule sizes as
//     2 × the stream's share of the bandwidth-delay product: the bytes that
//     leave during the link's round trip, with headroom, where that is more.
//
// A late key then waits behind at most that many bytes. Where the link is
// not known the window is the 4 MiB default and the credit large: without
// a link to pace, ordering matters less than keeping the pipe full.
//
//   credit = max(kCreditKeys × key, key + window)   per server; push: the
//            servers' push window (fan-in N), pull: the workers' pull
//            window (fan-in K)
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

// `key_bytes`: the largest key (--ps_chunk_kb resolved); `window_bytes`: the
// stream window of that direction; `direction`: "push" or "pull", for the
// reason.
CreditChoice ChooseCredit(int64_t key_bytes, int64_t window_bytes,
                          const std::string& direction);

}  // namespace gradsync
