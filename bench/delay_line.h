// A userspace delay line, for emulating link latency where the kernel cannot:
// this project's build machines run a kernel without sch_netem (and without
// fq), so `--netem=RATE,LATENCY` gets the rate but not the latency there.
//
// DelayedRendezvous wraps a job's rendezvous: when gradsync's ring transport
// publishes a listening address (keys "<prefix>/addr/<rank>" and
// "<prefix>/peer/<rank>") or a colocated parameter server publishes its gRPC
// address ("ps/colocated/<k>", ps/ps_sync.cc, under any prefix), it publishes
// instead the address of a relay, run by a thread of the same process, that
// forwards every byte in both directions `one_way` after it arrived. Every hop
// between two ranks then costs the latency once each way, as a netem delay on
// the path would. A process that reads back an address it published itself
// gets the real one: a worker's connection to its own colocated server stays
// inside the host, as it would on a cluster. The relay's copies cost CPU (a
// real NIC's do not), which the benchmark's cpu column shows. Only for
// bench/allreduce_benchmark: Gloo's connections do not pass through it, so
// Gloo rows of a delayed run have no added latency.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/cluster/rendezvous.h"

namespace gradsync {

// Relays connections to one address with a fixed delay, on its own thread.
class DelayRelay {
 public:
  // Listens on `host` (an ephemeral port) and forwards to `target`.
  static absl::StatusOr<std::unique_ptr<DelayRelay>> Start(
      const std::string& host, const std::string& target,
      absl::Duration one_way);
  ~DelayRelay();
  const std::string& address() const { return address_; }
  const std::string& target() const { return target_; }

 private:
  DelayRelay() = default;
  void Loop();

  int listen_fd_ = -1;
  int wake_pipe_[2] = {-1, -1};
  std::string address_;
  std::string target_;
  absl::Duration one_way_;
  std::thread thread_;
};

class DelayedRendezvous : public ForwardingRendezvous {
 public:
  DelayedRendezvous(Rendezvous* inner, std::string host, absl::Duration one_way)
      : ForwardingRendezvous(inner),
        host_(std::move(host)),
        one_way_(one_way) {}

  absl::Status Set(const std::string& key, const std::string& value) override;
  absl::StatusOr<std::string> Get(const std::string& key,
                                  absl::Duration timeout) override;

  // Whether a key holds an address whose connections are to be delayed.
  static bool IsDelayedAddressKey(const std::string& key);

 private:
  std::string host_;
  absl::Duration one_way_;
  // Guards relays_: a PsSync may publish from one thread while another
  // reads.
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<DelayRelay>> relays_;
};

}  // namespace gradsync
