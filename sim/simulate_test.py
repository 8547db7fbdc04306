#!/usr/bin/python3
"""sim/simulate on tiny clusters against hand-computed bytes and times, and
its refusals of bad input. One process per case: SimGrid keeps one engine
per process.

The tiny cluster: 4 workers, 1 Gbit/s links (125e6 bytes/s) with 100 us one
way, one bucket and no compute. Under CM02 (max-min sharing, no TCP
correction) a step is its alpha-beta time exactly; across N the all-reduces
are checked against allreduce/algorithms/cost_model.h, which the program
prints beside every result."""
import json
import math
import os
import subprocess
import tempfile
import unittest

SIMULATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "simulate")
CONSTANTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "constants.json")
B, ALPHA, S, N = 125e6, 100e-6, 4e6, 4
TINY = ["--workers=4", "--link=1gbit,100us", "--model=custom:4:1", "--bucket_mb=100"]
# 4 MiB in one tensor and 1 MiB keys: each of 4 servers holds one key, S/4.
MIB = 4 * 2**20
TINY_PS = ["--workers=4", "--link=1gbit,100us", "--model=custom:4.194304:1",
           "--bucket_mb=100", "--ps_key_kb=1024"]


def simulate(*args):
    done = subprocess.run([SIMULATE, *args], capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


def step(*args):
    code, out, err = simulate(*args)
    if code != 0:
        raise AssertionError(f"simulate {args} exited {code}: {err}")
    return json.loads(out)


class SimulateTest(unittest.TestCase):
    def assertStepMs(self, result, seconds):
        # The simulated step alone, where the alpha-beta model knows less
        # than the platform (an oversubscribed switch).
        self.assertAlmostEqual(result["step_ms"], 1e3 * seconds, delta=1e-6 * 1e3 * seconds)

    def assertMs(self, result, seconds):
        self.assertAlmostEqual(result["step_ms"], 1e3 * seconds, delta=1e-6 * 1e3 * seconds)
        self.assertAlmostEqual(result["alpha_beta_sync_ms"], 1e3 * seconds,
                               delta=1e-6 * 1e3 * seconds)

    def test_ring(self):
        # Bandwidth-bound (S/N/B = 8 ms > alpha): the link streams its
        # 2(N-1) segments back to back, one latency at the end; every link
        # carries 6 MB one way. One stream per rank and a tail of 2(N-1) hops.
        result = step("--strategy=ring", *TINY)
        self.assertMs(result, 2 * (N - 1) * S / N / B + ALPHA)
        self.assertEqual(result["busiest_link_bytes"], 2 * (N - 1) * S / N)
        self.assertEqual(result["messages"], N + 2 * (N - 1))
        self.assertEqual(result["exposed_ms"], result["step_ms"])

    def test_ring_latency_bound(self):
        # 4 KB at 1 ms: the first byte crosses 2(N-1) hops, the last
        # segment follows it.
        result = step("--strategy=ring", "--workers=4", "--link=1gbit,1ms",
                      "--model=custom:0.004:1", "--bucket_mb=100")
        self.assertMs(result, 2 * (N - 1) * 1e-3 + 4e3 / N / B)

    def test_halving_doubling(self):
        # log2 4 = 2 rounds each way, S/2 then S/4. Every round but the
        # first all-gather one (the last reduce-scatter one's partner) waits
        # for the partner's clear to send (peer_exchange.h): a header each,
        # and the rest of a send above the eager prefix (256 KiB, all of
        # them here) as a message of its own. The prefix's 2.1 ms on the wire
        # cover the header's 100 us, so no round waits.
        result = step("--strategy=halving_doubling", *TINY)
        self.assertMs(result, 2 * (2 * ALPHA + (S / 2 + S / 4) / B))
        self.assertEqual(result["busiest_link_bytes"], 2 * (S / 2 + S / 4))
        self.assertEqual(result["messages"], 2 * 2 * N + 3 * N + 3 * N)

    def test_clear_to_send_waits_where_the_prefix_is_shorter_than_a_latency(self):
        # 10 Gbit/s, 1 ms: the 256 KiB prefix takes 0.21 ms, then a round
        # waits for its partner's header, w = 1 ms - 0.21 ms, in the three
        # rounds that wait (above): 3 w over the rounds' alpha-beta time.
        b, alpha, eager = 1.25e9, 1e-3, 256 * 1024
        result = step("--strategy=halving_doubling", "--workers=4", "--link=10gbit,1ms",
                      "--model=custom:4:1", "--bucket_mb=100")
        self.assertMs(result, 2 * (2 * alpha + (S / 2 + S / 4) / b) + 3 * (alpha - eager / b))

    def test_all_reduces_against_the_cost_model(self):
        # Ring and halving-doubling exactly, N a power of two or not, the
        # bucket latency- or bandwidth-bound; the tree from N = 8 on, one
        # latency above the model's below that (sim/README.md).
        for link in ("1gbit,100us", "10gbit,1ms"):
            for n in (3, 8, 13):
                for strategy in ("ring", "halving_doubling", "tree"):
                    result = step(f"--strategy={strategy}", f"--workers={n}",
                                  f"--link={link}", "--model=custom:4:1",
                                  "--bucket_mb=100")
                    model, sim = result["alpha_beta_sync_ms"], result["sync_ms"]
                    alpha_ms = 0.1 if link.endswith("100us") else 1.0
                    # The clear to send's wait (peer_exchange.h): the model
                    # charges the tree one flow's, alpha - E/B; the
                    # simulator only the time the busiest link then idles,
                    # which is at most that.
                    rate = 125e6 if link.startswith("1gbit") else 1.25e9
                    wait_ms = max(0.0, alpha_ms - 1e3 * 256 * 1024 / rate)
                    if strategy == "tree":
                        self.assertGreaterEqual(sim, model - wait_ms - 1e-6, (strategy, n, link))
                        self.assertLessEqual(sim, model + (alpha_ms if n < 8 else 0) + 1e-6,
                                             (strategy, n, link))
                    else:
                        self.assertAlmostEqual(sim, model, delta=1e-6 * model,
                                               msg=(strategy, n, link))

    def test_tree_moves_each_half_once_per_edge(self):
        # The busiest rank of the double binary trees has 4 edges (internal
        # in one tree, a leaf in the other): 4 halves out of its link.
        result = step("--strategy=tree", "--workers=8", "--link=1gbit,100us",
                      "--model=custom:4:1", "--bucket_mb=100")
        self.assertEqual(result["busiest_link_bytes"], 4 * S / 2)

    def test_ps_with_one_server(self):
        # Four 1 MiB keys: the server's link takes N gradients while it
        # answers each key as its N pushes are in; the last key's N answers
        # follow, and each key on a stream pays its latency.
        result = step("--strategy=ps", "--servers=1", *TINY_PS)
        self.assertMs(result, 5 * ALPHA + (N * MIB + N * MIB / 4) / B)
        self.assertEqual(result["busiest_link_bytes"], N * MIB)

    def test_ps_with_as_many_servers_as_workers(self):
        result = step("--strategy=ps", "--servers=4", "--worker_group=1", *TINY_PS)
        self.assertMs(result, 2 * (ALPHA + MIB / B))
        self.assertEqual(result["busiest_link_bytes"], MIB)
        self.assertEqual(result["messages"], 2 * N * N)
        self.assertEqual(result["ps_key_bytes"], 2**20)
        # By default all N workers are one simulated host: 2K messages.
        merged = step("--strategy=ps", "--servers=4", *TINY_PS)
        self.assertEqual(merged["messages"], 2 * N)
        self.assertAlmostEqual(merged["step_ms"], result["step_ms"], delta=1e-6)

    def test_merged_workers_give_the_same_step(self):
        # 1, 2 and 4 workers per simulated host, on 3 servers of unequal
        # keys (the busiest one's link bounds the step): the same times and
        # per-host bytes, fewer messages.
        unequal = ["--strategy=ps", "--servers=3", "--ps_key_kb=128", *TINY]
        results = [step(*unequal, f"--worker_group={g}") for g in (1, 2, 4)]
        for merged in results[1:]:
            self.assertAlmostEqual(results[0]["step_ms"], merged["step_ms"], delta=1e-6)
            self.assertEqual(results[0]["busiest_link_bytes"], merged["busiest_link_bytes"])
        first = results[0]["messages"]
        self.assertEqual([r["messages"] for r in results], [first, first // 2, first // 4])
        self.assertLessEqual(results[0]["sync_ms"], results[0]["alpha_beta_sync_ms"] + 1e-6)

    def test_ps_keys_as_the_client_cuts_them(self):
        # The key rule's size (ps/key_size_rule.h) on a 4 MB tensor over 3
        # servers: keys of a power of two, and no server with more than 10 %
        # over its share, so the busiest server holds more than S/3. Its
        # link sets the step: its N pushes, and the answers that overlap
        # them key by key, but for the last key's, which wait for its N
        # pushes (at most the alpha-beta figure's N keys).
        result = step("--strategy=ps", "--servers=3", *TINY)
        key = result["ps_key_bytes"]
        self.assertEqual(key & (key - 1), 0)
        self.assertLessEqual(result["ps_imbalance"], 1.10)
        self.assertGreater(result["busiest_link_bytes"], N * S / 3)
        self.assertLessEqual(result["sync_ms"], result["alpha_beta_sync_ms"] + 1e-6)
        self.assertGreater(result["sync_ms"], 1e3 * (
            2 * ALPHA + result["busiest_link_bytes"] / B))

    def test_keys_let_pushes_and_answers_overlap(self):
        # 64 KiB keys: a server answers each key as its N pushes are in, so
        # its link's two directions work at once; the step is one direction's
        # bytes plus the last key's answers (its N copies), not two phases.
        result = step("--strategy=ps", "--servers=1", "--workers=4", "--link=1gbit,100us",
                      "--model=custom:4.194304:1", "--bucket_mb=100", "--ps_key_kb=64")
        one_way = N * MIB / B
        self.assertLess(result["sync_ms"], 1e3 * 1.1 * one_way)
        self.assertGreater(result["sync_ms"], 1e3 * one_way)
        self.assertLessEqual(result["sync_ms"], result["alpha_beta_sync_ms"] + 1e-6)

    def test_colocated_ps(self):
        # A host's own share stays inside it: (N-1)/N of S each way, twice.
        result = step("--strategy=ps", "--placement=colocated", *TINY_PS)
        self.assertMs(result, 2 * (ALPHA + (N - 1) * MIB / N / B))
        self.assertEqual(result["busiest_link_bytes"], 2 * (N - 1) * MIB / N)

    def test_compute_hides_what_overlaps_it(self):
        # ResNet-50's measured profile: exposed communication is the step
        # beyond forward + backward + optimizer, never negative.
        profile = os.path.join(os.path.dirname(SIMULATE), "profiles",
                               "resnet50-b64-fp32.json")
        for strategy in ("ring", "tree", "ps"):
            result = step(f"--strategy={strategy}", "--workers=4", "--link=100gbit,5us",
                          f"--profile={profile}")
            self.assertGreater(result["buckets"], 1)
            self.assertGreaterEqual(result["exposed_ms"], 0)
            self.assertAlmostEqual(result["step_ms"] - result["exposed_ms"],
                                   result["compute_ms"])
            self.assertEqual(result["gradient_bytes"], 4 * 25557032)
        # --compute_scale stretches the compute, not the bytes.
        base = step("--strategy=ring", "--workers=4", "--link=100gbit,5us",
                    f"--profile={profile}")
        slow = step("--strategy=ring", "--workers=4", "--link=100gbit,5us",
                    f"--profile={profile}", "--compute_scale=3")
        self.assertAlmostEqual(slow["compute_ms"], 3 * base["compute_ms"])
        self.assertEqual(slow["busiest_link_bytes"], base["busiest_link_bytes"])

    # Two hosts of two ranks: NICs of 1 Gbit/s and 100 us, each rank's link
    # inside its host 8 Gbit/s (1e9 bytes/s) and 10 us rank to rank.
    TWO_BY_TWO = ["--workers=4", "--gpus_per_host=2", "--link=1gbit,100us",
                  "--intra_link=8gbit,10us", "--model=custom:4:1", "--bucket_mb=100"]
    INTRA_B, INTRA_ALPHA = 1e9, 10e-6

    def test_ring_over_two_ranks_per_host(self):
        # Ring order is rank order: 0->1 and 2->3 inside a host, 1->2 and
        # 3->0 over the NICs, one flow each, so every NIC carries one flow
        # of 2(N-1)/N of the bucket each way. Those flows set the step: their
        # bytes at B, one cross-host latency (NIC's and the rank links'). The
        # tail's 6 hops (3 inside, 3 across: 360 us) and the last segment at
        # B (8 ms) are shorter.
        result = step("--strategy=ring", *self.TWO_BY_TWO)
        self.assertMs(result, 2 * (N - 1) * S / N / B + ALPHA + self.INTRA_ALPHA)
        self.assertEqual(result["busiest_link_bytes"], 2 * (N - 1) * S / N)
        self.assertEqual(result["messages"], N + 2 * (N - 1))

    def test_hierarchical_over_two_ranks_per_host(self):
        # hierarchical_allreduce.cc with R = 2: each rank sends its peer in
        # the host one shard (S/2) over the intra link, then halving-doubling
        # of its shard with the same local rank of the other host (two
        # rounds of S/4 each way; a host's two ranks share its NIC, B/2
        # each), then the all-gather inside (S/2 again).
        result = step("--strategy=hierarchical", *self.TWO_BY_TWO)
        inside = self.INTRA_ALPHA + S / 2 / self.INTRA_B
        across = 2 * (ALPHA + self.INTRA_ALPHA + (S / 4) / (B / 2))
        self.assertMs(result, 2 * inside + across)
        # Per NIC each way: two ranks' two rounds of S/4, 2(M-1)/M of S.
        self.assertEqual(result["busiest_link_bytes"], S)

    def test_hierarchical_with_one_rank_per_host_is_halving_doubling(self):
        hier = step("--strategy=hierarchical", *TINY)
        hd = step("--strategy=halving_doubling", *TINY)
        self.assertAlmostEqual(hier["step_ms"], hd["step_ms"], delta=1e-6)
        self.assertEqual(hier["busiest_link_bytes"], hd["busiest_link_bytes"])

    def test_oversubscribed_uplinks_slow_what_crosses_them(self):
        # Halving-doubling over 4 hosts, 2 per ToR, uplinks of 2B/2 = B. The
        # rounds with partner 2 away cross the spine, both of a ToR's ranks
        # at once: B/2 each for S/2, twice (halving and doubling); the
        # partner-1 rounds stay in the ToR (S/4 at B). Full bisection: every
        # round at B.
        args = ["--strategy=halving_doubling", *TINY]
        full = step(*args)
        self.assertMs(full, 4 * ALPHA + (2 * S / 2 + 2 * S / 4) / B)
        over = step(*args, "--oversubscription=2", "--hosts_per_tor=2")
        self.assertStepMs(over, 4 * ALPHA + (2 * S / 2 / 0.5 + 2 * S / 4) / B)
        self.assertEqual(over["busiest_uplink_bytes"], 2 * 2 * S / 2)
        self.assertEqual(full["busiest_uplink_bytes"], 0)
        # The ring crosses each ToR's uplink with one flow: not slowed.
        ring = step("--strategy=ring", *TINY, "--oversubscription=2", "--hosts_per_tor=2")
        self.assertMs(ring, 2 * (N - 1) * S / N / B + ALPHA)

    def test_ps_workers_share_their_hosts_nic(self):
        # 2 ranks per host push through one NIC: merged by host (the
        # default) or one endpoint per rank, the same step; with 4 servers
        # each NIC carries 2 gradients each way, twice one rank per host's.
        args = ["--strategy=ps", "--servers=4", "--workers=4", "--link=1gbit,100us",
                "--intra_link=8gbit,0us", "--model=custom:4.194304:1", "--bucket_mb=100",
                "--ps_key_kb=1024"]
        merged = step(*args, "--gpus_per_host=2")
        ranks = step(*args, "--gpus_per_host=2", "--worker_group=1")
        one = step(*args)
        self.assertAlmostEqual(merged["step_ms"], ranks["step_ms"], delta=1e-6)
        self.assertEqual(merged["busiest_link_bytes"], 2 * MIB)
        self.assertEqual(one["busiest_link_bytes"], MIB)
        # One key per server: the answers leave once the pushes are in.
        self.assertMs(merged, 2 * (ALPHA + 2 * MIB / B))
        self.assertMs(one, 2 * (ALPHA + MIB / B))

    def test_selector_runs_what_the_rule_picks(self):
        # A latency-bound bucket at N = 8 (1 ms links) goes to a log2 N
        # algorithm, a bandwidth-bound one to the ring (ChooseAllReduce); the
        # step is then that algorithm's own.
        for model, link, picked in (("custom:0.004:1", "1gbit,1ms", ("tree", "halving_doubling")),
                                    ("custom:40:1", "1gbit,100us", ("ring",))):
            args = ["--workers=8", f"--link={link}", f"--model={model}", "--bucket_mb=100"]
            selector = step("--strategy=allreduce", *args)
            (pick, count), = selector["selector_picks"].items()
            self.assertIn(pick, picked)
            self.assertEqual(count, 1)
            alone = step(f"--strategy={pick}", *args)
            self.assertAlmostEqual(selector["step_ms"], alone["step_ms"], delta=1e-6)

    def test_a_straggler_holds_every_worker_under_bsp(self):
        # Without the next forward overlapped: worker 2 sleeps 50 ms before
        # its compute, its bucket is ready then, and neither the ring nor the
        # PS's answers can finish before its bytes have gone through: the
        # step is the sleep plus the step without it (one bucket, no compute).
        ring = step("--strategy=ring", *TINY, "--straggler=2:50",
                    "--overlap_next_forward=false")
        self.assertStepMs(ring, 0.050 + 2 * (N - 1) * S / N / B + ALPHA)
        ps = step("--strategy=ps", "--servers=4", *TINY_PS, "--straggler=2:50",
                  "--overlap_next_forward=false")
        self.assertEqual(ps["worker_group"], 1)
        self.assertStepMs(ps, 0.050 + 2 * (ALPHA + MIB / B))
        self.assertAlmostEqual(ps["exposed_ms"], ps["step_ms"])

    def test_a_straggler_sleeps_while_the_last_step_communicates(self):
        # gradsync train's default: the sleep before the next forward runs
        # beside this step's all-reduce, so the step is the longer of the
        # two: a sleep shorter than the communication costs nothing, a
        # longer one is the step.
        comm = 2 * (N - 1) * S / N / B + ALPHA
        short_ms, long_ms = 0.5 * comm * 1e3, 2 * comm * 1e3
        short = step("--strategy=ring", *TINY, f"--straggler=2:{short_ms:g}")
        self.assertTrue(short["overlap_next_forward"])
        self.assertStepMs(short, comm)
        self.assertStepMs(step("--strategy=ring", *TINY, f"--straggler=2:{long_ms:g}"),
                          long_ms / 1e3)

    def test_compressed_buckets_move_their_encodings_bytes(self):
        # fp16: the ring with 16-bit values, half the bytes.
        self.assertMs(step("--strategy=ring", *TINY, "--compression=fp16"),
                      2 * (N - 1) * S / 2 / N / B + ALPHA)
        # random-k 1 %: the ring all-reduces the k = 10,000 kept floats,
        # latency-bound: 2(N-1) hops and the last 10 KB segment.
        k = 10_000
        self.assertMs(step("--strategy=ring", *TINY, "--compression=randomk:0.01"),
                      2 * (N - 1) * ALPHA + 4 * k / N / B)
        # top-k 1 %: every strategy all-gathers the encodings on the ring,
        # N-1 store-and-forward steps of one blob: 21 bytes of encoding
        # header, k indices and k values, 24 of frame.
        blob = 21 + 8 * k + 24
        for strategy in ("ring", "tree"):
            result = step(f"--strategy={strategy}", *TINY, "--compression=topk:0.01")
            self.assertMs(result, (N - 1) * (ALPHA + blob / B))
            self.assertEqual(result["busiest_link_bytes"], (N - 1) * blob)
        # The PS pushes and answers 16-bit values: half the bytes each way.
        self.assertMs(step("--strategy=ps", "--servers=4", *TINY_PS, "--compression=fp16"),
                      2 * (ALPHA + MIB / 2 / B))

    def test_every_method_moves_the_bytes_core_sync_compression_counts(self):
        # The encodings of core/sync/compression.h (SerializedBytes): a
        # 9-byte header (encoding, numel); kSparse 4 + 8 more and 4 + 4 bytes
        # a kept element; kOneBit two 4-byte scales and a bit an element in
        # u64 words. k = llround(ratio x numel).
        numel = int(S) // 4
        # bf16 on the ring: 16-bit values, 2(N-1)/N of 2 bytes a float.
        bf16 = step("--strategy=ring", *TINY, "--compression=bf16")
        self.assertEqual(bf16["busiest_link_bytes"], 2 * (N - 1) * 2 * numel // N)
        # onebit: the ring all-gathers N-1 encodings, 24 bytes of frame each.
        onebit_blob = 9 + 8 + 8 * -(-numel // 64)
        self.assertEqual(onebit_blob, 125017)
        onebit = step("--strategy=halving_doubling", *TINY, "--compression=onebit")
        self.assertEqual(onebit["busiest_link_bytes"], (N - 1) * (onebit_blob + 24))
        self.assertMs(onebit, (N - 1) * (ALPHA + (onebit_blob + 24) / B))
        # The PS, 4 keys of 262,144 floats: random-k 1 % pushes and answers
        # k = 2,621 (index, value) pairs a key (every worker the same
        # indices); a worker's NIC carries its 4 keys each way.
        key = MIB // 4 // 4  # floats
        k = 2621
        sparse = 21 + 8 * k
        randomk = step("--strategy=ps", "--servers=4", *TINY_PS, "--compression=randomk:0.01")
        self.assertEqual(randomk["busiest_link_bytes"], 4 * sparse)
        # top-k: the answer is the union of N independent top-k's,
        # key (1 - (1 - k/key)^N) pairs in expectation; a server answers
        # its key to N workers.
        union = math.ceil(key * (1 - (1 - k / key) ** N))
        topk = step("--strategy=ps", "--servers=4", *TINY_PS, "--compression=topk:0.01")
        self.assertEqual(topk["busiest_link_bytes"], N * (21 + 8 * union))
        # onebit: 32,785-byte pushes, float32 answers (1 MiB a key).
        onebit_ps = step("--strategy=ps", "--servers=4", *TINY_PS, "--compression=onebit")
        self.assertEqual(onebit_ps["busiest_link_bytes"], N * 4 * key)

    def test_mixed_placement_as_the_client_counts_it(self):
        # --ps_colocated_servers=c beside --servers=s separate ones: K = c + s.
        # All N colocated is --placement=colocated.
        mixed = step("--strategy=ps", *TINY_PS, "--ps_colocated_servers=4", "--servers=0")
        colocated = step("--strategy=ps", "--placement=colocated", *TINY_PS)
        self.assertEqual(mixed["servers"], 4)
        self.assertAlmostEqual(mixed["step_ms"], colocated["step_ms"], delta=1e-6)
        self.assertEqual(mixed["busiest_link_bytes"], colocated["busiest_link_bytes"])
        # Two serving workers and two separate servers, a quarter each: a
        # serving worker's link carries S + (N-2)·S/4 one way (its pushes to
        # the 3 other servers and its server's answers to the 3 other
        # workers, ps/client/partitioner.h); the workers that do not serve
        # and the separate servers carry S, which bounds each phase.
        two = step("--strategy=ps", *TINY_PS, "--ps_colocated_servers=2", "--servers=2")
        self.assertEqual(two["servers"], 4)
        self.assertEqual(two["placement"], "mixed:2")
        self.assertEqual(two["busiest_link_bytes"], MIB + (N - 2) * MIB // 4)
        self.assertStepMs(two, 2 * (ALPHA + MIB / B))

    def constants(self, **values):
        directory = tempfile.TemporaryDirectory()
        self.addCleanup(directory.cleanup)
        path = os.path.join(directory.name, "constants.json")
        with open(path, "w") as f:
            json.dump({"constants": {k: {"value": v} for k, v in values.items()}}, f)
        return path

    def test_constants_change_the_links_as_model_constants_h_says(self):
        # Half the rate, twice the wire's latency plus the transport's
        # overhead per message: the ring's tiny step on that link, and its
        # alpha-beta figure on the same.
        path = self.constants(bandwidth_factor=0.5, latency_factor=2.0,
                              tcp_message_overhead_us=50, grpc_message_overhead_us=300)
        result = step("--strategy=ring", *TINY, f"--constants={path}")
        alpha = 2 * ALPHA + 50e-6
        self.assertMs(result, 2 * (N - 1) * S / N / (B / 2) + alpha)
        self.assertEqual(result["link_bytes_per_s"], B / 2)
        self.assertAlmostEqual(result["link_alpha_us"], 1e6 * alpha)
        # The PS's keys pay gRPC's overhead instead.
        result = step("--strategy=ps", "--servers=1", *TINY_PS, f"--constants={path}")
        self.assertMs(result, 5 * (2 * ALPHA + 300e-6) + (N * MIB + N * MIB / 4) / (B / 2))
        # No constants and neutral ones give the links as given.
        plain = step("--strategy=ring", *TINY)
        neutral = step("--strategy=ring", *TINY, f"--constants={self.constants()}")
        self.assertEqual(plain["step_ms"], neutral["step_ms"])
        self.assertEqual(plain["constants"], "none")

    def test_fitted_constants_are_sim_constants_json(self):
        with open(CONSTANTS) as f:
            fitted = {k: v["value"] for k, v in json.load(f)["constants"].items()}
        result = step("--strategy=ring", *TINY, "--constants=fitted")
        self.assertAlmostEqual(result["link_bytes_per_s"], B * fitted["bandwidth_factor"])
        self.assertAlmostEqual(result["link_alpha_us"],
                               1e6 * ALPHA * fitted["latency_factor"] +
                               fitted["tcp_message_overhead_us"])
        result = step("--strategy=ps", "--servers=1", *TINY_PS, "--constants=fitted")
        self.assertAlmostEqual(result["link_alpha_us"],
                               1e6 * ALPHA * fitted["latency_factor"] +
                               fitted["grpc_message_overhead_us"])

    def test_message_cpu_runs_on_cores_every_rank_shares(self):
        # 4 KB at 1 ms, 100 us of CPU per message taken in: in every ring
        # step all 4 ranks take one in at once, 4 x 100 us of work on the
        # given cores; the first byte crosses 2(N-1) hops, each its latency
        # and that work, and the last 1 KB segment follows.
        for cores in (1, 2, 4):
            path = self.constants(message_cpu_us=100, cpu_cores=cores)
            hop = 1e-3 + N * 100e-6 / cores
            ring = step("--strategy=ring", "--workers=4", "--link=1gbit,1ms",
                        "--model=custom:0.004:1", "--bucket_mb=100", f"--constants={path}")
            self.assertStepMs(ring, 2 * (N - 1) * hop + 1e3 / B)
            # Halving-doubling: 4 rounds, in each every rank takes one
            # message in (2 KB, 1 KB, 1 KB, 2 KB).
            hd = step("--strategy=halving_doubling", "--workers=4", "--link=1gbit,1ms",
                      "--model=custom:0.004:1", "--bucket_mb=100", f"--constants={path}")
            self.assertStepMs(hd, 4 * hop + 6e3 / B)
        # The PS's gRPC streams are not the all-reduces' transport.
        path = self.constants(message_cpu_us=100, cpu_cores=2)
        self.assertEqual(step("--strategy=ps", "--servers=1", *TINY_PS,
                              f"--constants={path}")["step_ms"],
                         step("--strategy=ps", "--servers=1", *TINY_PS)["step_ms"])

    def test_ring_loop_has_its_own_cpu_time_and_step_overhead(self):
        # The ring's loop (ring_message_cpu_us, ring_step_overhead_us) in
        # place of a peer exchange's message (message_cpu_us): 4 KB at 1 ms
        # over 4 ranks, 2 cores. Each ring step: its latency, the 4 ranks'
        # 30 us of the loop's CPU over 2 cores, then 50 us of overhead.
        path = self.constants(message_cpu_us=100, cpu_cores=2, ring_message_cpu_us=30,
                              ring_step_overhead_us=50)
        args = ["--workers=4", "--link=1gbit,1ms", "--model=custom:0.004:1",
                "--bucket_mb=100", f"--constants={path}"]
        ring = step("--strategy=ring", *args)
        self.assertStepMs(ring, 2 * (N - 1) * (1e-3 + N * 30e-6 / 2 + 50e-6) + 1e3 / B)
        # Halving-doubling keeps the peer exchange's 100 us (as in
        # test_message_cpu_runs_on_cores_every_rank_shares) and no overhead.
        hd = step("--strategy=halving_doubling", *args)
        self.assertStepMs(hd, 4 * (1e-3 + N * 100e-6 / 2) + 6e3 / B)
        # Absent, the ring's loop costs what a peer exchange's message does.
        same = step("--strategy=ring", *args[:-1], "--constants=" + self.constants(
            message_cpu_us=100, cpu_cores=2))
        self.assertStepMs(same, 2 * (N - 1) * (1e-3 + N * 100e-6 / 2) + 1e3 / B)
        # An overhead alone, with no CPU time anywhere, still reaches the ring.
        alone = step("--strategy=ring", *args[:-1], "--constants=" + self.constants(
            ring_step_overhead_us=50))
        self.assertStepMs(alone, 2 * (N - 1) * (1e-3 + 50e-6) + 1e3 / B)

    def test_peer_exchange_message_waits_its_wake_up_per_rank_per_core(self):
        # 50 us per rank per core, 4 ranks on 2 cores: every message a peer
        # exchange takes in waits 100 us after it lands, busy cores or not.
        # Halving-doubling of 4 KB at 1 ms: 4 rounds, each one message in.
        path = self.constants(message_wake_us=50, cpu_cores=2)
        args = ["--workers=4", "--link=1gbit,1ms", "--model=custom:0.004:1",
                "--bucket_mb=100", f"--constants={path}"]
        hd = step("--strategy=halving_doubling", *args)
        self.assertStepMs(hd, 4 * (1e-3 + N * 50e-6 / 2) + 6e3 / B)
        # The ring's loop is not a peer exchange: its steps do not wait.
        ring = step("--strategy=ring", *args)
        self.assertStepMs(ring, 2 * (N - 1) * 1e-3 + 1e3 / B)

    def test_token_bucket_lets_a_burst_out_after_an_idle_spell(self):
        # Halving-doubling of 4 MB over 2 ranks, a 128 KiB bucket per NIC
        # (full at the start): the first round's 2 MB leave all but the
        # bucket at the rate; while the second round's partner data cross the
        # wire (alpha) the link idles and the bucket refills alpha.B = 12.5 kB,
        # which the second round's 2 MB leave at once.
        path = self.constants(link_burst_bytes=131072)
        result = step("--strategy=halving_doubling", "--workers=2", "--link=1gbit,100us",
                      "--model=custom:4:1", "--bucket_mb=100", f"--constants={path}")
        self.assertStepMs(result, 2 * ALPHA + (S - 131072 - ALPHA * B) / B)
        # The busiest link still counts every byte.
        self.assertEqual(result["busiest_link_bytes"], S)

    def test_row_sparse_buckets_move_their_rows(self):
        # A 1 MiB table of rows of 64 floats (4,096 rows), 100 touched per
        # worker: an encoding of 1 + 8 + 4 + 8 + 100 x 4 + 100 x 64 x 4 =
        # 26,021 bytes (core/sync/compression.h). Its 3 copies on the
        # busiest link are fewer bytes than the dense ring's 1.5 MiB, so the
        # ring all-gathers them (24-byte frames) after the sizes (8 bytes).
        rows = ["--workers=4", "--link=1gbit,100us", "--model=custom:1.048576:1",
                "--bucket_mb=100", "--row_sparse=64:100"]
        blob = 1 + 8 + 4 + 8 + 100 * 4 + 100 * 64 * 4
        self.assertEqual(blob, 26021)
        for strategy in ("ring", "tree", "allreduce"):
            result = step(f"--strategy={strategy}", *rows)
            self.assertEqual(result["busiest_link_bytes"], 3 * (8 + 24) + 3 * (blob + 24))
            self.assertMs(result, 3 * ALPHA + 3 * 32 / B + 3 * ALPHA + 3 * (blob + 24) / B)
        # 2,100 rows: 3 x (21 + 2,100 x 260) = 1,638,063 bytes outweigh the
        # dense ring's 1,572,864: the sizes, then the dense ring.
        dense = step("--strategy=ring", *rows[:-1], "--row_sparse=64:2100")
        self.assertEqual(dense["busiest_link_bytes"], 3 * 32 + 2 * 3 * 2**20 // 4)
        # The PS: each worker pushes its 26,021 bytes; the server answers the
        # union, 4096 (1 - (1 - 100/4096)^4) = 385.6 -> 386 rows in
        # expectation: 21 + 386 x 260 = 100,381 bytes to each of 4 workers.
        ps = step("--strategy=ps", "--servers=1", "--ps_key_kb=1024", *rows)
        self.assertEqual(ps["busiest_link_bytes"], 4 * 100381)

    def test_profile_from_a_run_folder(self):
        # sim/testdata/run-traced: worker 0's two steps, buckets of 1 MiB,
        # 0.5 MiB and 262,400 bytes (layout.json) ready 13, 23 and 31 ms
        # into a 30 ms backward in step 0, 10, 20 and 29 ms in step 1: their
        # medians 11.5, 21.5 and 30 ms; 3 ms of optimizer. Two ranks on the
        # ring: a bucket takes S/B + alpha; the last ends at 30 + 2.0992 +
        # 0.1 ms.
        run = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata")
        result = step("--strategy=ring", "--workers=2", "--link=1gbit,100us",
                      f"--profile={run}/run-traced")
        self.assertEqual(result["buckets"], 3)
        self.assertEqual(result["gradient_bytes"], 2**20 + 2**19 + 262400)
        self.assertAlmostEqual(result["compute_ms"], 33.0)
        self.assertEqual(result["profile_steps"], 2)
        self.assertStepMs(result, 30e-3 + 262400 / B + ALPHA + 3e-3)
        with tempfile.TemporaryDirectory() as empty:
            for folder, words in ((f"{run}/run-without-buckets", "has no bucket spans"),
                                  (empty, "the run folder has no trace")):
                code, out, err = simulate("--strategy=ring", f"--profile={folder}")
                self.assertEqual(code, 2, folder)
                self.assertEqual(out, "", folder)
                self.assertEqual(len(err.strip().splitlines()), 1, (folder, err))
                self.assertIn(words, err, folder)

    def test_bad_constants_are_one_line_and_exit_2(self):
        for path, words in (
                (self.constants(bandwidth_factor=0), "constant bandwidth_factor = 0: give a "
                                                     "factor above 0"),
                (self.constants(tcp_message_overhead_us=-1), "tcp_message_overhead_us = -1"),
                (self.constants(speed=2), "unknown constant speed"),
                (self.constants(message_cpu_us=10), "message_cpu_us needs cpu_cores"),
                (self.constants(ring_message_cpu_us=10), "ring_message_cpu_us needs cpu_cores"),
                (self.constants(ring_step_overhead_us=-5), "ring_step_overhead_us = -5"),
                (self.constants(message_wake_us=20), "message_wake_us needs cpu_cores"),
                ("/nonexistent.json", "--constants=/nonexistent.json: none, fitted or")):
            code, out, err = simulate("--strategy=ring", *TINY, f"--constants={path}")
            self.assertEqual(code, 2, path)
            self.assertEqual(out, "", path)
            self.assertEqual(len(err.strip().splitlines()), 1, (path, err))
            self.assertIn(words, err, path)

    def test_bad_input_is_one_line_and_exit_2(self):
        for args, words in (
                (["--strategy=allgather", *TINY],
                 "--strategy=allgather: ring, halving_doubling, tree, hierarchical, allreduce"),
                (["--workers=0", "--model=custom:4"], "--workers=0: give at least 1 worker"),
                (["--link=fast", "--model=custom:4"], "--link=fast"),
                (["--model=custom:x"], "--model=custom:x: give custom:MB"),
                (["--profile=/nonexistent.json"], "cannot read the profile"),
                (["--strategy=ps", "--servers=4", "--worker_group=3", *TINY],
                 "--worker_group=3: give a divisor of --workers=4"),
                (["--strategy=ring", "--worker_group=2", *TINY],
                 "an all-reduce's ranks are not interchangeable"),
                (["--strategy=ps", "--placement=colocated", "--servers=2", *TINY],
                 "give --servers=4 (N), not 2"),
                (["--straggler=4:50", *TINY],
                 "--straggler=4:50: rank 4 is not one of the 4 workers"),
                (["--straggler=1:fast", *TINY], "--straggler=1:fast: give RANK:MS"),
                (["--strategy=tree", "--compression=fp16", *TINY],
                 "16-bit values travel on the ring only"),
                (["--compression=zip", *TINY], "zip"),
                (["--row_sparse=64", *TINY], "--row_sparse=64: give WIDTH:ROWS"),
                (["--row_sparse=64:10", "--compression=onebit", *TINY],
                 "the real code sends a row-sparse bucket's rows as they are"),
                (["--compute_scale=0", *TINY], "--compute_scale=0: give a factor above 0"),
                (["--strategy=ps", "--ps_colocated_servers=5", "--servers=0", *TINY],
                 "--ps_colocated_servers=5: at most one per worker (4)"),
                (["--strategy=ps", "--ps_partition=fair", *TINY], "fair"),
                (["--gpus_per_host=3", *TINY],
                 "--gpus_per_host=3 does not divide --workers=4 into whole hosts"),
                (["--gpus_per_host=2", "--intra_link=fast", *TINY],
                 "--intra_link=fast: give RATE[,LATENCY]"),
                (["--oversubscription=0.5", *TINY],
                 "--oversubscription=0.5: a ToR's uplink carries at most"),
                (["--oversubscription=2", "--hosts_per_tor=0", *TINY],
                 "--hosts_per_tor=0: an oversubscribed switch needs"),
                (["--strategy=ps", "--servers=2", "--gpus_per_host=4", "--worker_group=2", *TINY],
                 "--worker_group=2: merge whole hosts under one switch")):
            code, out, err = simulate(*args)
            self.assertEqual(code, 2, args)
            self.assertEqual(out, "", args)
            self.assertEqual(len(err.strip().splitlines()), 1, (args, err))
            self.assertIn(words, err, args)


if __name__ == "__main__":
    unittest.main()
