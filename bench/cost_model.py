#!/usr/bin/python3
"""The α–β cost model of gradient synchronization, next to its derivation.

A message of m bytes over one link takes α + m/B: α is the latency (software
and wire), B the bandwidth. Links are full duplex: a node sends and receives
at B at the same time. S is the gradient's size in bytes, N the number of
workers, K the number of parameter servers.

Ring all-reduce (reduce-scatter, then all-gather). The gradient is cut into
N pieces of S/N. In each of the 2(N−1) rounds every rank sends one piece to
its right neighbour and receives one from its left, all at once. A rank
forwards each byte as soon as it has arrived and been added, so the rounds
overlap: either every link stays busy (its 2(N−1) pieces back to back, the
last arriving α after it left) or the first byte's 2(N−1) hops rule (and the
last piece follows it):

    T_ring = max(2(N−1)/N · S/B + α,  2(N−1)·α + S/(N·B))     (1)

Store-and-forward rounds would cost 2(N−1)·α + 2(N−1)/N·S/B, (2N−3)·α more
for bandwidth-bound buffers. The bandwidth term tends to 2·S/B whatever N
is: the ring's selling point.

Parameter server, K separate servers. Every worker pushes its whole gradient
(S bytes out of its link) and pulls the whole average (S bytes in). Server k
holds a share f_k of the keys (f_k = 1/K when balanced), so its link takes
N·f_k·S in and sends N·f_k·S out. Push and pull use opposite directions of
every link, and with many keys they pipeline (the pull of one key runs while
the next is pushed), so a step costs the busier link's one-direction time,
plus the tail of the last key (pulled after all N pushed it) and one round
trip:

    T_ps = max(S, N·f_max·S)/B + tail + 2α                    (2)
    tail = N·b/B,   b = min(c, m)

c is the last key's size (≤ the chunk, --ps_chunk_kb) and m the server's
finalisation block (--ps_message_kb): a key lives on one server, so its last
block, final only once the slowest worker's part of it arrived, leaves that
one server N times (once per worker) after the pushes end — whatever K is.
(An earlier version had max(c, N·f_max·c), which for K = N balanced servers
is c: N times too small; at N = 8 with 78 KB keys and 100 Mbit/s it hid
44 ms of a 260 ms step.) The busiest server holds at least one key, so
f_max ≥ c/S however many servers there are (balanced_share).

Reduction. A server sums N·f·S bytes of pushes a step as they arrive; that
is hidden behind its link unless it is slower: with γ the bytes one server
sums per second, the first term of (2) becomes max(max(S, N·f_max·S)/B,
N·f_max·S/γ) (ps_time's reduce_bytes_per_s). At this project's emulated
rates (≤ 1 Gbit/s) γ of a few GB/s never binds; at 100 Gbit/s it may.

With K = 1 the server's link carries N·S: T grows ∝ N. With K = N balanced
servers the busiest link carries S each way: T ≈ S/B, half the ring's
2(N−1)/N·S/B — the BytePS argument for spare server bandwidth.

Parameter server colocated with the workers (K = N, server r inside worker
r). A node's link now carries its own pushes to the N−1 other servers and
its server's answers to the N−1 other workers' pulls, in the same direction:
(N−1)/N·S + (N−1)/N·S out, and as much in. The answers follow the pushes
as they arrive, so, as in (1), either the link stays busy with both (the
push's latency hidden behind the answers to earlier keys, the last answer
arriving α after it left) or the answers wait out a push's latency after
the node's own pushes left:

    T_colocated = max(2(N−1)/N·S/B + α, 2α + (N−1)/N·S/B) + (N−1)·b/B   (3)

the ring's bandwidth term with 2 latencies instead of 2(N−1), and the tail
of (2) less the copy that stays inside the node. (An earlier form charged
2α on top of the bandwidth term; at 1 Gbit/s, 5 ms one way, N = 2, 1 MiB it
ran 0.81× the measured time: allreduce_family.md.) Separate servers (2)
keep both latencies: a worker's pushes and its results use opposite
directions of its link, so nothing is sent while a push is in flight. With fewer keys than
nodes the busiest node's share f_max exceeds 1/N and its link carries
S + (N−2)·f_max·S (colocated_ps_time's largest_share).

BytePS's placement spectrum (Jiang et al., OSDI 2020, §3.1): N workers that
also serve plus k separate CPU-only servers; with each machine's share of
the keys chosen optimally the busiest link carries

    T_byteps = 2N(N−1)·S / ((N² + kN − 2k)·B)                  (4)

which is (3)'s 2(N−1)/N·S/B at k = 0 and (2)'s S/B at k = N. BytePS's k is
the number of separate servers, with every worker serving; its shares are
unequal (a worker's server takes less than a separate one).

gradsync's mix (--ps_colocated_servers=c plus s separate servers, K = c + s,
0 ≤ c ≤ N): workers 0..c−1 also serve, the others only compute, and the
partitioner gives every server the same share f (balanced: 1/K). Per step
and direction, a serving worker's link carries its pushes to the other
servers and its server's results to the other workers, S(1 − f) + (N−1)·f·S
= S + (N−2)·f·S; a worker that does not serve, S; a separate server, N·f·S.
For K ≥ 2 the first is the largest (1 + (N−2)/K ≥ N/K). A serving
worker's answers hide its pushes' latency as in (3); a separate server's
link and a non-serving worker's carry one kind each way and pay both
latencies as in (2):

    T_mixed = max(max((S + (N−2)·f·S)/B + α, 2α + (1 − f)·S/B),
                  max(N·f·S, S)/B + 2α) + (N−1)·b/B              (5)

(the second term only where there are separate servers or workers that do
not serve) with (3)'s tail: the busiest link belongs to a serving worker,
whose own copy of its last block stays inside. c = N, s = 0 is (3); c = 0 is (2).
c = N with s separate is BytePS's layout with equal instead of optimal
shares, so (5) ≥ (4) there: at N = 4, s = 2, 1.33·S/B against 1.2·S/B.
For c < N BytePS gives no formula; (5) is the one to compare with.

Balanced shares (--ps_partition=balanced; placement_shares): the serving
workers' servers take f_c each, the separate ones f_s, c·f_c + s·f_s = 1,
chosen so that the two kinds of link carry the same, the busiest as little
as it can: S + (N−2)·f_c·S = N·f_s·S = N·(1 − c·f_c)·S/s gives

    f_c = (N − s) / (s(N − 2) + N·c),   f_s = (1 − c·f_c) / s      (5b)

(f_c = 0 when s ≥ N: the separate servers alone then keep every link at
S; equal shares when c = 0 or s = 0, where there is nothing to trade).
(5) with these shares is the busiest link's S + (N−2)·f_c·S. With c = N and
k = s ≤ N separate servers it is (N² + N² − 2N)·S / (N² + kN − 2k) — (4),
BytePS's optimum: BytePS's layout is the c = N end of gradsync's mix. At
N = 4: c = 4, s = 2 gives f_c = 0.1, f_s = 0.3, 1.2·S/B; c = 2, s = 2 gives
f_c = 1/6, f_s = 1/3, 1.33·S/B against equal shares' 1.5·S/B. Keys are
whole (at most --ps_chunk_kb), so the partitioner only approaches the
targets: predict() takes each kind's largest share from the job's own
partition (placed_shares models it where the job did not say).

The rest of the all-reduce family (allreduce/algorithms/cost_model.cc holds the same
formulas in C++ for --sync=allreduce's choice; cost_model_test.py checks that
the two agree). Halving-doubling over p = 2^⌊log2 N⌋ ranks swaps S/2, S/4, …
with one partner per step, then the same in reverse; N > p folds the r = N − p
extra ranks into partners first (S there and back, two more steps):

    T_hd = 2·log2 p·α + 2(p−1)/p · S/B  [+ 2α + 2·S/B if N > p]   (6)

Double binary tree: two trees, each carrying S/2, a node forwarding bytes as
soon as both children's have arrived. Rank r has E_r tree edges over both
trees (at most 4), each carrying S/2 each way; its connections share its link
evenly (TCP, nothing sent first), so all of them end at E_r·(S/2)/B, and the
last byte of each connection (the transfer queued last on it) then travels
its hops: up to the root and down to the deepest leaf (d_r + D) for a
reduce, to the rank's deepest descendant (h_r) for a broadcast; H_r the most.
A half above the clear to send's prefix E waits w = max(0, α − E/B) once.
The first slice's 2D hops are the floor:

    T_tree = max(2D·α + (S/2)/B,  max_r E_r·(S/2)/B + H_r·α + w)   (7)

Hierarchical, R ranks per node, M = N/R nodes: reduce-scatter and all-gather
inside the node (one step each, (R−1)/R·S over the fast local path), and
halving-doubling on S/R across the nodes, with R ranks sharing each host
link (bandwidth B/R each; B when every rank has a link of its own):

    T_hier = 2(α_i + (R−1)/R·S/B_i) + T_hd(M, S/R, α, B/R)      (8)

Buckets and overlap. Backward hands buckets off in reverse layer order;
bucket b is ready after the compute spent on the layers it holds (the
synthetic models spend time in proportion to bytes). Communication is one
queue over the link: bucket b starts at max(its ready time, the end of the
previous bucket) and takes T(size_b) by (1), (2) or (3). The exposed
communication — what the trainer measures as time blocked in Finish — is
the last bucket's end minus the end of compute.

α and B are measured on the spot with `netem probe` (core/launch/link_probe.h):
α is half a 1-byte round trip, B the slope of transfer time against size.

Usage:
  cost_model.py probe --link=1gbit              measure α and B (root)
  cost_model.py compare SWEEP_DIR               measured points vs predictions
  cost_model.py extrapolate [--alpha_us=25 --gbit=1 | --sweep=DIR] [--plot=x.png]
  cost_model.py compression [--workers=8 --model_mb=10 --gbit=0.1 --alpha_us=100]
"""
import argparse
import dataclasses
import heapq
import json
import math
import os
import subprocess
import sys

MIB = 1 << 20
PS_CHUNK_BYTES = 4 * MIB  # --ps_chunk_kb's default: the key size
PS_MESSAGE_BYTES = 1 * MIB  # the server's block where the link is not known

# Parameter bytes of the synthetic models (core/model/synthetic_model.h).
MODEL_BYTES = {
    "resnet50": 25_557_032 * 4,
    "bert-base": 109_482_240 * 4,
    "vgg16": 138_357_544 * 4,
}


@dataclasses.dataclass
class Link:
    alpha_s: float        # one-way latency, seconds
    bandwidth: float      # bytes per second, each direction

    def describe(self):
        return (f"α = {self.alpha_s * 1e6:.1f} us, "
                f"B = {self.bandwidth / 1e9:.4f} GB/s ({self.bandwidth * 8 / 1e6:.0f} Mbit/s)")


# --- Formulas (1), (2), (3) -------------------------------------------------

def ring_time(n, size, link):
    """(1): one ring all-reduce of `size` bytes among n ranks."""
    if n == 1:
        return 0.0
    segment = size / n / link.bandwidth
    return max(2 * (n - 1) * segment + link.alpha_s,
               2 * (n - 1) * link.alpha_s + segment)


# gradsync's eager prefix before a peer's clear to send (allreduce/
# peer_exchange.h, --allreduce_eager_kb).
EAGER_BYTES = 256 << 10


def halving_doubling_time(n, size, link, eager_bytes=0):
    """(6): one halving-doubling all-reduce of `size` bytes among n ranks.
    With a clear to send (eager prefix E > 0, gradsync's), every step of
    more than E bytes also waits max(0, α − E/B), the partner's header
    crossing the link, but the first all-gather step, whose partner is the
    last reduce-scatter step's (allreduce/algorithms/cost_model.cc)."""
    if n <= 1:
        return 0.0
    p = 1 << (n.bit_length() - 1)
    t = 2 * math.log2(p) * link.alpha_s + 2 * (p - 1) / p * size / link.bandwidth
    if n > p:
        t += 2 * link.alpha_s + 2 * size / link.bandwidth
    wait = link.alpha_s - eager_bytes / link.bandwidth
    if eager_bytes > 0 and wait > 0:
        step = size / 2
        while step > eager_bytes and step * p >= size:
            t += 2 * wait
            step /= 2
        if size / p > eager_bytes:
            t -= wait
    return t


def _bit_trees(n):
    """NCCL's bit trees over positions 1..n: rank r at r + 1 in tree 0, at the
    mirror n − r (even n) or shifted r, rank 0 at n (odd n) in tree 1."""
    def node(p):
        bit = p & -p
        parent = (p ^ bit) | (bit << 1)
        if parent > n:
            parent = p ^ bit
        children, low = [], bit >> 1
        if low:
            children.append(p - low)
        while low and p + low > n:
            low >>= 1
        if low:
            children.append(p + low)
        return parent, children

    trees = []
    for rank in (lambda p: p - 1, (lambda p: n - p) if n % 2 == 0 else (lambda p: p % n)):
        tree = {}
        for p in range(1, n + 1):
            parent, children = node(p)
            tree[rank(p)] = (rank(parent) if parent else -1, [rank(c) for c in children])
        trees.append(tree)
    return trees


def _midpoint_trees(n):
    """In-order balanced trees over positions 0..n−1, the middle one the root;
    rank (x + t) mod n at position x in tree t."""
    nodes = {}

    def build(lo, hi, parent):
        if lo >= hi:
            return -1
        root = lo + (hi - lo) // 2
        left, right = build(lo, root, root), build(root + 1, hi, root)
        nodes[root] = (parent, [c for c in (left, right) if c >= 0])
        return root
    build(0, n, -1)
    trees = []
    for t in (0, 1):
        def rank(x):
            return -1 if x < 0 else (x + t) % n
        trees.append({rank(x): (rank(p), [rank(c) for c in children])
                      for x, (p, children) in nodes.items()})
    return trees


def tree_edges(trees, n):
    """Per rank, its edges (parent and children) over both trees."""
    return [sum((t[r][0] >= 0) + len(t[r][1]) for t in trees) for r in range(n)]


def double_binary_tree(n, tree):
    """{rank: (parent, [children])} of tree `tree` (0 or 1): of the bit and the
    midpoint constructions, the one with fewer edges on the busiest rank, then
    fewer such ranks, the bit trees on a tie (allreduce/algorithms/tree_allreduce.h)."""
    def busiest(trees):
        edges = tree_edges(trees, n)
        return max(edges), edges.count(max(edges))
    bit, midpoint = _bit_trees(n), _midpoint_trees(n)
    return (midpoint if busiest(midpoint) < busiest(bit) else bit)[tree]


def tree_rank_costs(n):
    """Per rank of the double binary trees, (E_r, H_r) of (7): its tree edges
    over both trees, and the hops its link's last byte still travels. On each
    of its connections the transfer queued last (key, then tree, then reduce
    before broadcast, as tree_allreduce.cc queues them) ends last: a reduce's
    byte goes up to the root and down to the deepest leaf (d_r + D), a
    broadcast's down to the rank's deepest descendant (h_r). Each pair once."""
    trees = [double_binary_tree(n, 0), double_binary_tree(n, 1)]

    def depth(tree, x):
        d = 0
        while tree[x][0] >= 0:
            x, d = tree[x][0], d + 1
        return d

    def height(tree, x):
        children = tree[x][1]
        return 1 + max(height(tree, c) for c in children) if children else 0

    tree_depth = [max(depth(tree, x) for x in range(n)) for tree in trees]
    costs = set()
    for r in range(n):
        last, edges = {}, 0
        for t, tree in enumerate(trees):
            parent, children = tree[r]
            sends = ([(parent, (height(tree, r), t, 0), depth(tree, r) + tree_depth[t])]
                     if parent >= 0 else [])
            sends += [(c, (tree_depth[t] + depth(tree, r), t, 1), height(tree, r))
                      for c in children]
            for peer, order, hops in sends:
                edges += 1
                if peer not in last or order > last[peer][0]:
                    last[peer] = (order, hops)
        costs.add((edges, max(hops for _, hops in last.values())))
    return sorted(costs)


def tree_time(n, size, link, eager_bytes=0):
    """(7): one double-binary-tree all-reduce of `size` bytes among n ranks.
    A rank's connections share its link evenly, so all of them end at
    E_r·(S/2)/B; its last byte then travels H_r more hops, and a half above
    the clear to send's prefix waits for it once, as a halving-doubling step
    does (allreduce/algorithms/cost_model.cc). The first slice's 2D hops are the floor."""
    if n <= 1:
        return 0.0
    half = size / 2 / link.bandwidth
    wait = 0.0
    if eager_bytes > 0 and size / 2 > eager_bytes:
        wait = max(0.0, link.alpha_s - eager_bytes / link.bandwidth)
    levels = max(1, (n).bit_length() - 1)
    t = 2 * levels * link.alpha_s + half
    for edges, hops in tree_rank_costs(n):
        t = max(t, edges * half + hops * link.alpha_s + wait)
    return t


def hierarchical_time(n, ranks_per_node, size, link, intra=None, shared=True,
                      eager_bytes=0):
    """(8): R ranks per node, across nodes over `link`, shared by the node's R
    ranks (`shared`) or one each; `intra` is the path inside a node (default:
    the same link)."""
    if n <= 1:
        return 0.0
    intra = intra or link
    r = max(1, ranks_per_node)
    t = 0.0
    if r > 1:
        t += 2 * (intra.alpha_s + (r - 1) / r * size / intra.bandwidth)
    across = Link(link.alpha_s, link.bandwidth / r) if shared else link
    return t + halving_doubling_time(n // r, size / r, across, eager_bytes)


def allreduce_pick(n, size, link, eager_bytes=EAGER_BYTES):
    """--sync=allreduce's choice and its predicted time: the lowest of (1),
    (6) and (7), the ring on a tie (selecting_allreduce.cc)."""
    best, time = "ring", ring_time(n, size, link)
    for name, t in (("halving_doubling", halving_doubling_time(n, size, link, eager_bytes)),
                    ("tree", tree_time(n, size, link, eager_bytes))):
        if t < time:
            best, time = name, t
    return best, time


def ps_tail_block(last_key, message_bytes=PS_MESSAGE_BYTES):
    """b of (2): the last block the server finalises."""
    return min(last_key, message_bytes)


def ps_time(n, size, link, largest_share, last_key=None, message_bytes=PS_MESSAGE_BYTES,
            reduce_bytes_per_s=None):
    """(2): push and pull of `size` bytes through separate servers, the
    busiest of which holds `largest_share` of the bytes. With
    `reduce_bytes_per_s` (γ: bytes of pushes one server sums per second) the
    busiest server's sums, N·f_max·S/γ, bound the step too where they are
    slower than its link (a fast network, a slow server CPU)."""
    if last_key is None:
        last_key = min(size, PS_CHUNK_BYTES)
    busiest = max(size, n * largest_share * size) / link.bandwidth
    if reduce_bytes_per_s:
        busiest = max(busiest, n * largest_share * size / reduce_bytes_per_s)
    tail = n * ps_tail_block(last_key, message_bytes)
    return busiest + tail / link.bandwidth + 2 * link.alpha_s


def colocated_ps_time(n, size, link, last_key=None, message_bytes=PS_MESSAGE_BYTES,
                      largest_share=None):
    """(3): every worker also serves a share of the keys (1/n balanced). The
    busiest node sends its pushes to the others, S·(1 − f), and its server's
    results to the n − 1 others, (n − 1)·f·S: S + (n − 2)·f·S, which is
    2(n−1)/n·S at f = 1/n."""
    if n == 1:
        return 0.0
    if last_key is None:
        last_key = min(size, PS_CHUNK_BYTES)
    share = 1.0 / n if largest_share is None else largest_share
    tail = (n - 1) * ps_tail_block(last_key, message_bytes)
    return _serving_worker_time(n, size, share, link) + tail / link.bandwidth


def _serving_worker_time(n, size, share, link):
    """(3) and (5) without the tail: a worker that also serves `share` of the
    bytes sends its pushes, S·(1 − f), and its server's answers, (n − 1)·f·S,
    one way; the answers hide a push's latency or wait it out."""
    busy = (size + (n - 2) * share * size) / link.bandwidth
    pushes = (1 - share) * size / link.bandwidth
    return max(busy + link.alpha_s, 2 * link.alpha_s + pushes)


def byteps_time(n, k, size, link):
    """(4): BytePS's optimum with n workers that also serve and k separate
    servers (bandwidth term only; no tail)."""
    if n == 1:
        return 0.0
    return 2 * n * (n - 1) * size / ((n * n + k * n - 2 * k) * link.bandwidth)


def mixed_ps_time(n, colocated, separate, size, link, last_key=None,
                  message_bytes=PS_MESSAGE_BYTES, largest_share=None, separate_share=None):
    """(5): workers 0..colocated−1 also serve, beside `separate` servers of
    their own; every server holds `largest_share` of the bytes at most
    (1/K balanced). With `separate_share` (unequal shares, (5b)),
    `largest_share` is the serving workers' servers' largest and
    `separate_share` the separate servers' largest."""
    k = colocated + separate
    if k < 1 or colocated > n:
        raise ValueError(f"no servers or more colocated ({colocated}) than workers ({n})")
    share = 1.0 / k if largest_share is None else largest_share
    far_share = share if separate_share is None else separate_share
    if colocated == 0:
        return ps_time(n, size, link, far_share, last_key=last_key,
                       message_bytes=message_bytes)
    if n == 1 and separate == 0:
        return 0.0  # the only worker's own server: nothing crosses a link
    if last_key is None:
        last_key = min(size, PS_CHUNK_BYTES)
    time = _serving_worker_time(n, size, share, link)
    if separate or colocated < n:
        # A separate server's link or a worker that does not serve: one
        # kind of traffic each way, both latencies paid, as in (2).
        one_way = max(n * far_share * size if separate else 0.0, size)
        time = max(time, one_way / link.bandwidth + 2 * link.alpha_s)
    tail = (n - 1) * ps_tail_block(last_key, message_bytes)
    return time + tail / link.bandwidth


def placement_shares(n, colocated, separate, partition="equal"):
    """(5b): the target share of one serving worker's server and of one
    separate server (ServerShares in ps/client/partitioner.h)."""
    k = colocated + separate
    if k < 1 or colocated > n or colocated < 0 or separate < 0:
        raise ValueError(f"no servers or more colocated ({colocated}) than workers ({n})")
    if partition not in ("equal", "balanced"):
        raise ValueError(f"unknown partition {partition}")
    if partition == "equal" or colocated == 0 or separate == 0 or n == 1:
        return 1.0 / k, 1.0 / k
    f_c = max(0.0, (n - separate) / (separate * (n - 2) + n * colocated))
    return f_c, (1 - colocated * f_c) / separate


def placed_shares(size, n, colocated, separate, partition="equal", chunk=PS_CHUNK_BYTES):
    """The largest share the serving workers' servers and the separate
    servers end up with when `size` bytes, cut into keys of at most `chunk`,
    go largest first to the server least full relative to its (5b) target,
    as ps/client/partitioner.h places them (tensor boundaries aside)."""
    f_c, f_s = placement_shares(n, colocated, separate, partition)
    targets = [f_c] * colocated + [f_s] * separate
    keys = [chunk] * int(size // chunk)
    if size - chunk * len(keys) > 0:
        keys.append(size - chunk * len(keys))
    loads = [0.0] * len(targets)
    for key in keys:  # already largest first
        fills = [(loads[s] + key) / t if t > 0 else math.inf for s, t in enumerate(targets)]
        s = fills.index(min(fills))
        loads[s] += key
    return (max(loads[:colocated], default=0.0) / size,
            max(loads[colocated:], default=0.0) / size)


def balanced_share(size, k, chunk=PS_CHUNK_BYTES):
    """The busiest server's share of `size` bytes cut into keys of at most
    `chunk` and placed largest first on the least-loaded of k servers, as
    ps/client/partitioner.h does (tensor boundaries aside): at least one key's
    share, however large k is."""
    keys = [chunk] * int(size // chunk)
    if size - chunk * len(keys) > 0:
        keys.append(size - chunk * len(keys))
    loads = [0.0] * min(k, len(keys))
    heapq.heapify(loads)
    for key in keys:  # already largest first
        heapq.heapreplace(loads, loads[0] + key)
    return max(loads) / size


def sync_time(strategy, n, k, size, link, largest_share=None, colocated=0, ranks_per_node=1):
    """Time to synchronize `size` bytes with no overlap (`colocated`: the
    servers of K that workers run, for ps-mixed; `ranks_per_node` for
    hierarchical)."""
    if strategy == "local" or (n == 1 and strategy != "ps"):
        return 0.0
    if strategy == "ring":
        return ring_time(n, size, link)
    if strategy == "halving_doubling":
        return halving_doubling_time(n, size, link, EAGER_BYTES)
    if strategy == "tree":
        return tree_time(n, size, link, EAGER_BYTES)
    if strategy == "hierarchical":
        return hierarchical_time(n, ranks_per_node, size, link,
                                 eager_bytes=EAGER_BYTES)
    if strategy == "allreduce":
        return allreduce_pick(n, size, link)[1]
    if strategy == "ps-colocated":
        return colocated_ps_time(n, size, link)
    if strategy == "ps":
        return ps_time(n, size, link, largest_share or balanced_share(size, k))
    if strategy == "ps-mixed":
        return mixed_ps_time(n, colocated, k - colocated, size, link,
                             largest_share=largest_share or balanced_share(size, k))
    raise ValueError(f"no cost model for strategy {strategy}")


def exposed_communication(bucket_bytes, compute_s, bucket_time):
    """Simulates the bucket queue: returns (communication end, exposed time)
    with compute ending at `compute_s`. `bucket_bytes` in hand-off order."""
    total = sum(bucket_bytes)
    ready, link_free = 0.0, 0.0
    for size in bucket_bytes:
        ready += compute_s * size / total  # compute is proportional to bytes
        link_free = max(ready, link_free) + bucket_time(size)
    return link_free, max(0.0, link_free - compute_s)


def training_flags(*texts):
    """'--a=1 --b=2' texts -> {'a': '1', 'b': '2'}; later texts override."""
    flags = {}
    for text in texts:
        flags.update(f[2:].split("=", 1) for f in text.split() if f.startswith("--") and "=" in f)
    return flags


def predict(point, link, bucket_bytes, base_compute_ms, base_step_ms, last_tensor_bytes=None,
            extra_flags=""):
    """Predicted communication, exposed communication and step time (ms) of
    one sweep point, given the N = 1 run's compute and step times.
    `last_tensor_bytes`: the last tensor handed off (the first layer's),
    which bounds the PS's last key. `extra_flags`: the training flags every
    job of the sweep got (after `--`); the point's swept flags override them."""
    n, k, strategy = point["workers"], point["servers"], point["strategy"]
    share = point.get("largest_server_share") or (1.0 / k if k else None)
    flags = training_flags(extra_flags, point.get("sweep", ""))
    compression = point.get("compression") or flags.get("compression", "none")
    if compression != "none":
        # (9)–(13): small compressed buckets, no PS tail worth modelling.
        pull = flags.get("ps_pull", "union")

        def compressed_bucket_time(size):
            return compressed_sync_time(
                "ps" if strategy.startswith("ps") else strategy, n, k, size, link,
                compression, share, pull, ranks_per_node=point.get("ranks_per_node", 1),
                cores_per_rank=point.get("host_cores", n) / n)
        comm = sum(compressed_bucket_time(size) for size in bucket_bytes)
        _, exposed = exposed_communication(bucket_bytes, base_compute_ms / 1000,
                                           compressed_bucket_time)
        return {
            "predicted_comm_ms": 1000 * comm,
            "predicted_exposed_ms": 1000 * exposed,
            "predicted_step_ms": base_step_ms + 1000 * exposed,
        }
    # The key size: a flag, else what the job derived (scaling.py reads it
    # from the summary; --ps_chunk_kb=0 is auto), else the old default.
    chunk = int(flags.get("ps_chunk_kb", 0)) * 1024 or int(
        point.get("ps_chunk_bytes") or PS_CHUNK_BYTES)
    # The servers' block likewise (--ps_message_kb=0 is auto).
    message = int(flags.get("ps_message_kb", 0)) * 1024 or int(
        point.get("ps_message_bytes") or PS_MESSAGE_BYTES)
    last_key = min(chunk, last_tensor_bytes or bucket_bytes[-1])
    if strategy == "ps":
        # Each bucket's keys go to the servers in the partitioner's
        # proportions; the last key of the step leaves the tail.
        def bucket_time(size):
            return ps_time(n, size, link, share, last_key=0)
        comm = ps_time(n, sum(bucket_bytes), link, share, last_key=last_key,
                       message_bytes=message)
        tail = comm - ps_time(n, sum(bucket_bytes), link, share, last_key=0)
    elif strategy == "ps-colocated":
        def bucket_time(size):
            return colocated_ps_time(n, size, link, last_key=0)
        comm = colocated_ps_time(n, sum(bucket_bytes), link, last_key=last_key,
                                 message_bytes=message)
        tail = comm - colocated_ps_time(n, sum(bucket_bytes), link, last_key=0)
    elif strategy == "ps-mixed":
        colocated = point["colocated"]
        # Each kind of server's largest share: the job's own (scaling.py
        # reads them from its summary), else the partitioner's model for
        # the partition that ran.
        partition = point.get("partition") or flags.get("ps_partition", "equal")
        colocated_share = point.get("colocated_server_share")
        separate_share = point.get("separate_server_share")
        if colocated_share is not None or separate_share is not None:
            colocated_share, separate_share = colocated_share or 0.0, separate_share or 0.0
        elif partition != "equal":
            colocated_share, separate_share = placed_shares(
                sum(bucket_bytes), n, colocated, k - colocated, partition, chunk)
        else:
            colocated_share = separate_share = share

        def mixed(size, last):
            return mixed_ps_time(n, colocated, k - colocated, size, link, last_key=last,
                                 message_bytes=message, largest_share=colocated_share,
                                 separate_share=separate_share)

        def bucket_time(size):
            return mixed(size, 0)
        comm = mixed(sum(bucket_bytes), last_key)
        tail = comm - mixed(sum(bucket_bytes), 0)
    else:
        def bucket_time(size):
            return sync_time(strategy, n, k, size, link,
                             ranks_per_node=point.get("ranks_per_node", 1))
        comm = sum(bucket_time(size) for size in bucket_bytes)
        tail = 0.0
    _, exposed = exposed_communication(bucket_bytes, base_compute_ms / 1000, bucket_time)
    exposed += tail
    prediction = {
        "predicted_comm_ms": 1000 * comm,
        "predicted_exposed_ms": 1000 * exposed,
        "predicted_step_ms": base_step_ms + 1000 * exposed,
    }
    if strategy == "ps-mixed" and point["colocated"] == n:
        # BytePS's layout (every worker serves, K − N separate servers) with
        # its optimal shares: what equal shares leave on the table.
        prediction["byteps_optimum_comm_ms"] = 1000 * (
            byteps_time(n, k - n, sum(bucket_bytes), link) + 2 * link.alpha_s)
    return prediction


# --- Compression (--compression) ----------------------------------------------
#
# A bucket of S bytes is numel = S/4 floats; top-k and random-k keep
# k = max(1, round(ratio·numel)) of them. What each method puts on the busiest
# link, one direction, per bucket (core/sync/compression.h's byte format: a
# 9-byte header, +12 for (index, value) pairs, +8 for onebit's two scales):
#
#   none             dense all-reduce of S                    (1), (6), (7)...
#   fp16 / bf16      the ring on 16-bit values: 2(N−1)/N·S/2            (9)
#   topk / onebit    ring all-gather of every rank's encoding E:
#                    each link carries all N encodings but one,
#                    (N−1)·E, E = 21 + 8k (top-k) or 17 + 8·⌈numel/64⌉
#                    (onebit, ≈ S/32), in N−1 steps:
#                    T = (N−1)·α + (N−1)·E/B                           (10)
#   randomk          the same k indices on every rank (one seed): the
#                    algorithm's own dense all-reduce of 4k bytes      (11)
#   row-sparse       (an embedding table, under none) the size exchange,
#   (none)           (N−1)·α, then min((10) with E the touched rows'
#                    encoding, the dense ring)                          (12)
#
# The all-gather's (N−1)·E grows with N, the ring's 2(N−1)/N·S does not: at
# top-k 1 % (E ≈ 2 % of S) the gather moves less than the ring only while
# N − 1 < 2(N−1)/N / 0.02, i.e. for N below ~100.
#
# Parameter server (formulas for ps/; K servers, the busiest holding a share
# f of the keys; push and pull use opposite directions of every link):
#
#   push per worker  none S, fp16/bf16 S/2, topk/randomk 8k (pairs),
#                    onebit S/32 + 8
#   pull per worker  --ps_pull=union: the union of the pushed indices,
#                    8·min(u, numel/2) with k ≤ u ≤ N·k (u = k for
#                    random-k: shared indices; N·k, the bound, for top-k),
#                    dense 4·numel once the union passes half the bucket;
#                    --ps_pull=topk: 8k; --ps_pull=dense (and onebit): S;
#                    fp16/bf16: S/2
#   T_ps = max(push, pull, N·f·push, N·f·pull)/B + 2α                   (13)
#
# Compute. The codec's own time, from bench/compression_benchmark (CPU time,
# 4 MiB bucket, one core; the codec of the commit that set these values,
# `git log -S'"topk": (2.38'`, 2026-11-25, load average 8–11 on 2 shared
# cores, so CPU time rather than wall time), milliseconds per 10^6 bytes of float32
# gradient: (encode with error feedback, decode). A step adds one encode and
# one decode per bucket, N decodes for the gathered methods (every rank
# decodes every rank's encoding). The 16-bit ring's per-hop rounding is
# counted as one encode and one decode of the bucket. These assume a core
# per rank; `cores_per_rank` < 1 (N ranks emulated on fewer cores, as
# scaling.py's jobs on one machine are) divides the core's speed.
CODEC_MS_PER_MB = {
    "none": (0.0, 0.0),
    "fp16": (2.04, 0.84),
    "bf16": (0.24, 0.28),
    "topk": (2.38, 0.003),
    "randomk": (0.47, 0.003),
    "onebit": (3.31, 1.14),
}
SPARSE_HEADER_BYTES = 21  # encoding, numel, row_width, rows
ONEBIT_HEADER_BYTES = 17  # encoding, numel, two scales
GATHER_FRAME_BYTES = 24  # allreduce/algorithms/ring_allgather.h's frame header
# The CPU all-reduce family's --sync= names, in allreduce/allreduce_table.cc's
# order: the one list Python reads them from (scaling.py, compare.py);
# //allreduce:allreduce_table_test fails when the two differ.
ALLREDUCE_FAMILY = ("ring", "halving_doubling", "tree", "hierarchical", "allreduce")


def parse_compression(spec):
    """'topk:0.01' -> ('topk', 0.01); 'fp16' -> ('fp16', 1.0)."""
    method, _, ratio = (spec or "none").partition(":")
    if method not in CODEC_MS_PER_MB:
        raise ValueError(f"unknown compression '{spec}' (none, fp16, bf16, topk:R, "
                         "randomk:R, onebit)")
    try:
        value = float(ratio) if ratio else 1.0
    except ValueError:
        raise ValueError(f"compression '{spec}': the ratio '{ratio}' is not a number; "
                         "topk and randomk take a ratio in (0, 1], like topk:0.01") from None
    if (method in ("topk", "randomk")) != bool(ratio) or not 0 < value <= 1:
        raise ValueError(f"compression '{spec}': topk and randomk take a ratio in (0, 1], "
                         "the others none")
    return method, value


def kept_elements(numel, ratio):
    return max(1, min(numel, round(ratio * numel)))


def encoding_bytes(method, ratio, size):
    """E: bytes of one rank's encoding of a `size`-byte bucket."""
    numel = max(1, int(size // 4))
    if method in ("topk", "randomk"):
        return SPARSE_HEADER_BYTES + 8 * kept_elements(numel, ratio)
    if method == "onebit":
        return ONEBIT_HEADER_BYTES + 8 * math.ceil(numel / 64)
    if method in ("fp16", "bf16"):
        return 9 + 2 * numel
    return 9 + 4 * numel


def allgather_time(n, blob_bytes, link):
    """(10): ring all-gather of one blob per rank."""
    if n <= 1:
        return 0.0
    return (n - 1) * link.alpha_s + (n - 1) * (blob_bytes + GATHER_FRAME_BYTES) / link.bandwidth


def codec_time(method, n, size, gathered, cores_per_rank=1.0):
    encode, decode = CODEC_MS_PER_MB[method]
    return ((encode + decode * (n if gathered else 1)) * size / 1e6 / 1000
            / min(1.0, cores_per_rank))


def ps_compressed_bytes(method, ratio, n, size, pull="union"):
    """(13)'s (push, pull) bytes per worker for one `size`-byte bucket."""
    numel = max(1, int(size // 4))
    if method == "none":
        return size, size
    if method in ("fp16", "bf16"):
        return size / 2, size / 2
    if method == "onebit":
        return encoding_bytes("onebit", 1.0, size), size
    k = kept_elements(numel, ratio)
    push = 8 * k
    if pull == "dense":
        return push, size
    if pull == "topk":
        return push, 8 * k
    union = k if method == "randomk" else min(numel, n * k)
    return push, (8 * union if union <= numel / 2 else 4 * numel)


def compressed_link_bytes(strategy, compression, n, size, largest_share=None, pull="union"):
    """Bytes on the busiest link, one direction, for one `size`-byte bucket."""
    method, ratio = parse_compression(compression)
    if strategy in ALLREDUCE_FAMILY:
        if n <= 1:
            return 0.0
        if method in ("topk", "onebit"):
            return (n - 1) * encoding_bytes(method, ratio, size)
        if method == "randomk":
            return 2 * (n - 1) / n * 4 * kept_elements(max(1, int(size // 4)), ratio)
        if method in ("fp16", "bf16"):
            return 2 * (n - 1) / n * size / 2
        return 2 * (n - 1) / n * size
    push, pulled = ps_compressed_bytes(method, ratio, n, size, pull)
    share = largest_share if largest_share is not None else 1.0
    return max(push, pulled, n * share * push, n * share * pulled)


def compressed_sync_time(strategy, n, k, size, link, compression, largest_share=None,
                         pull="union", ranks_per_node=1, cores_per_rank=1.0):
    """(9)–(13) plus the codec's compute: one bucket of `size` bytes."""
    method, ratio = parse_compression(compression)
    if method == "none":
        return sync_time(strategy, n, k, size, link, largest_share,
                         ranks_per_node=ranks_per_node)
    numel = max(1, int(size // 4))
    if strategy in ALLREDUCE_FAMILY:
        gathered = method in ("topk", "onebit")
        if gathered:
            comm = allgather_time(n, encoding_bytes(method, ratio, size), link)
        elif method == "randomk":
            comm = sync_time(strategy, n, k, 4 * kept_elements(numel, ratio), link,
                             ranks_per_node=ranks_per_node)
        else:  # fp16 / bf16: the ring only (the factories refuse the others)
            comm = ring_time(n, size / 2, link)
        return comm + codec_time(method, n, size, gathered, cores_per_rank)
    share = largest_share if largest_share is not None else (1.0 / k if k else 1.0)
    comm = (compressed_link_bytes("ps", compression, n, size, share, pull) / link.bandwidth
            + 2 * link.alpha_s)
    return comm + codec_time(method, n, size, False, cores_per_rank)


def print_compression_table(link, n, size, k=None, pull="union",
                            methods=("none", "fp16", "bf16", "topk:0.01", "randomk:0.01",
                                     "onebit")):
    """Bytes on the busiest link and predicted time of one bucket of `size`
    bytes, ring vs PS with K servers (K = N by default), per method."""
    k = k or n
    print(f"One {size / 1e6:.1f} MB bucket, N = {n}, PS K = {k} (--ps_pull={pull}); "
          f"{link.describe()}")
    rows = []
    for method in methods:
        ring_bytes = compressed_link_bytes("ring", method, n, size)
        ps_bytes = compressed_link_bytes("ps", method, n, size, 1.0 / k, pull)
        rows.append((method, f"{ring_bytes / 1e6:.3f}",
                     f"{1000 * compressed_sync_time('ring', n, 0, size, link, method):.1f}",
                     f"{ps_bytes / 1e6:.3f}",
                     f"{1000 * compressed_sync_time('ps', n, k, size, link, method, 1.0 / k, pull):.1f}"))
    print_table(("compression", "ring MB/link", "ring ms", "PS MB/link", "PS ms"), rows)


# --- Measuring α and B ----------------------------------------------------------

def probe(link_spec, netem_binary="bazel-bin/tools/netem"):
    """Runs `netem probe` and returns (Link, the probe's JSON)."""
    result = subprocess.run([netem_binary, "probe", f"--link={link_spec}", "--json"],
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        sys.exit(f"cost_model: netem probe --link={link_spec} failed:\n{result.stderr}")
    measured = json.loads(result.stdout.strip().splitlines()[-1])
    return Link(measured["alpha_us"] / 1e6, measured["bandwidth_bytes_per_s"]), measured


# --- Measured against predicted -------------------------------------------------

def error_percent(measured, predicted):
    """How far the measurement is from the prediction, as measured over
    predicted minus one: +10 ran 10 % slower than predicted, -10 faster."""
    if measured is None or predicted is None or predicted <= 0:
        return None
    return 100.0 * (measured - predicted) / predicted


def print_comparison(points):
    """Every measured point beside its prediction and the error."""
    header = ("strategy", "N", "K", "model MB", "link", "bucket MiB", "compute ms",
              "measured step", "predicted", "err %", "measured exposed", "predicted", "err %")
    rows = []
    for p in points:
        if "predicted_step_ms" not in p:
            continue
        servers = str(p["servers"])
        if p["strategy"] == "ps-mixed":
            servers += f" ({p['colocated']} in workers)"
        compression = p.get("compression") or "none"
        strategy = p["strategy"] + ("" if compression == "none" else f" {compression}")
        rows.append((strategy, str(p["workers"]), servers,
                     f"{p['model_bytes'] / 1e6:.1f}", p["link"], f"{p['bucket_mb']:g}",
                     f"{p['compute_ms']:g}", f"{p['step_ms']:.1f}", f"{p['predicted_step_ms']:.1f}",
                     format_error(error_percent(p["step_ms"], p["predicted_step_ms"])),
                     f"{p['exposed_ms']:.1f}", f"{p['predicted_exposed_ms']:.1f}",
                     format_error(error_percent(p["exposed_ms"], p["predicted_exposed_ms"]))))
    print_table(header, rows)


def format_error(value):
    return "-" if value is None else f"{value:+.0f}"


def print_table(header, rows):
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    line = "  ".join(h.rjust(w) for h, w in zip(header, widths))
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))


# --- Extrapolation to large N --------------------------------------------------

EXTRAPOLATION_N = [2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]


def extrapolate(link, model_bytes, bucket_mb=25, chunk=PS_CHUNK_BYTES):
    """Predicted synchronization time (ms, no overlap) of each strategy for
    every N in EXTRAPOLATION_N. Buckets matter only for the all-reduces'
    latency terms: each bucket is its own all-reduce. The PS's servers hold whole
    keys of at most `chunk` bytes (balanced_share): past S/chunk servers
    more of them do not help, and the busiest still sends N copies."""
    buckets = max(1, math.ceil(model_bytes / (bucket_mb * MIB)))
    last_key = min(model_bytes, chunk)
    rows = {}
    for n in EXTRAPOLATION_N:
        def ps(k):
            return 1000 * ps_time(n, model_bytes, link, balanced_share(model_bytes, k, chunk),
                                  last_key=last_key)
        rows[n] = {
            "ring": 1000 * buckets * ring_time(n, model_bytes / buckets, link),
            "ps K=1": ps(1),
            "ps K=N/4": ps(max(1, n // 4)),
            "ps K=N": ps(n),
            "halving_doubling": 1000 * buckets * halving_doubling_time(
                n, model_bytes / buckets, link, EAGER_BYTES),
            "tree": 1000 * buckets * tree_time(n, model_bytes / buckets, link,
                                               EAGER_BYTES),
            "ps colocated": 1000 * colocated_ps_time(
                n, model_bytes, link, last_key=last_key,
                largest_share=balanced_share(model_bytes, n, chunk)),
        }
    return rows


def print_extrapolation(link, models):
    print(f"Predicted time to synchronize one step's gradient (ms, no overlap); {link.describe()}")
    for name, size in models.items():
        rows = extrapolate(link, size)
        strategies = list(next(iter(rows.values())).keys())
        print(f"\n{name} ({size / 1e6:.1f} MB)")
        print_table(("N",) + tuple(strategies),
                    [(str(n),) + tuple(f"{rows[n][s]:.1f}" for s in strategies) for n in rows])


def plot_extrapolation(link, models, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models), 4), squeeze=False)
    for ax, (name, size) in zip(axes[0], models.items()):
        rows = extrapolate(link, size)
        for strategy in next(iter(rows.values())):
            ax.plot(list(rows), [rows[n][strategy] / 1000 for n in rows], marker=".",
                    label=strategy)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("workers N")
        ax.set_ylabel("s per step (communication)")
        ax.set_title(f"{name}, {size / 1e6:.0f} MB")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(f"α–β prediction: {link.describe()}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


# --- Command line ----------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("probe", help="measure α and B through an emulated link")
    p.add_argument("--link", default="1gbit")
    c = sub.add_parser("compare", help="a sweep's measured points vs the model")
    c.add_argument("sweep_dir")
    e = sub.add_parser("extrapolate", help="table and plot up to N = 1024")
    e.add_argument("--alpha_us", type=float, help="latency; default: probe --link")
    e.add_argument("--gbit", type=float, help="bandwidth in Gbit/s; default: probe --link")
    e.add_argument("--link", default="1gbit", help="link to probe when α/B are not given")
    e.add_argument("--sweep", help="take α and B from this sweep folder's probe")
    e.add_argument("--model_mb", type=float, action="append",
                   help="also a custom model of this many MB")
    e.add_argument("--plot", help="write a PNG here")
    z = sub.add_parser("compression", help="bytes per link and time of each --compression")
    z.add_argument("--alpha_us", type=float, default=100.0)
    z.add_argument("--gbit", type=float, default=0.1)
    z.add_argument("--workers", type=int, default=8)
    z.add_argument("--servers", type=int, default=0, help="PS K; 0: N")
    z.add_argument("--model_mb", type=float, default=10.0, help="one bucket of this many MB")
    z.add_argument("--ps_pull", default="union", choices=("union", "topk", "dense"))
    args = parser.parse_args()

    if args.command == "compression":
        print_compression_table(Link(args.alpha_us / 1e6, args.gbit * 1e9 / 8), args.workers,
                                args.model_mb * 1e6, args.servers or None, args.ps_pull)
        return

    if args.command == "probe":
        link, measured = probe(args.link)
        print(json.dumps(measured, indent=1))
        print(link.describe())
    elif args.command == "compare":
        with open(os.path.join(args.sweep_dir, "sweep.json")) as f:
            sweep = json.load(f)
        print_comparison(sweep["points"])
    elif args.command == "extrapolate":
        if args.alpha_us is not None and args.gbit is not None:
            link = Link(args.alpha_us / 1e6, args.gbit * 1e9 / 8)
        elif args.sweep:
            with open(os.path.join(args.sweep, "sweep.json")) as f:
                measured = next(iter(json.load(f)["links"].values()))
            link = Link(measured["alpha_us"] / 1e6, measured["bandwidth_bytes_per_s"])
        else:
            link, _ = probe(args.link)
        models = dict(MODEL_BYTES)
        for mb in args.model_mb or []:
            models[f"custom {mb:g} MB"] = mb * 1e6
        print_extrapolation(link, models)
        if args.plot:
            plot_extrapolation(link, models, args.plot)


if __name__ == "__main__":
    main()
