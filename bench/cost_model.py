#!/usr/bin/python3
"""The α–β cost model of gradient synchronization: Python's side.

A message of m bytes over one link takes α + m/B: α is the latency (software
and wire), B the bandwidth, each direction at once. S is the gradient's size
in bytes, N the number of workers, K the number of parameter servers.

The formulas and their derivations exist once, in C++, and this file asks
them through `gradsync predict` (tools/predict_command.cc), one process kept
open per Python process, or one batch (ask_many):

  (1) ring              allreduce/algorithms/cost_model.h  RingAllReduceSeconds
  (2) PS, K separate    ps/cost_model.h  SeparatePsSeconds (the tail N·b/B,
                        b = min(last key, --ps_message_kb): PsTailBlockBytes)
  (3) PS colocated      ps/cost_model.h  ColocatedPsSeconds
  (4) BytePS's optimum  ps/cost_model.h  BytePsOptimumSeconds
  (5) PS mixed          ps/cost_model.h  MixedPsSeconds; (5b) the balanced
                        shares: ServerShares in ps/client/partitioner.h
  (6) halving-doubling  allreduce/algorithms/cost_model.h  HalvingDoubling…
  (7) double binary tree, its trees (tree_allreduce.h) and per-rank costs
  (8) hierarchical      allreduce/algorithms/cost_model.h  Hierarchical…
  (10) ring all-gather  allreduce/algorithms/cost_model.h  RingAllGatherSeconds
  (14) one step         core/sync/schedule_cost_model.h  PredictScheduledStep
                        (the "step" query): fifo or priority, over (1)–(8)

What is Python's own: a sweep point's prediction from its flags (predict),
the compressed methods' bytes per link and codec time (9)–(13), the fifo
bucket queue they still use (exposed_communication), measuring α and B, the
tables and the plots.

Buckets, overlap and the schedule (14). Backward hands buckets off in
reverse layer order; bucket b is ready after the backward spent on the
layers it holds, in proportion to their bytes (as the synthetic models
spend it). Communication is one queue over the link, each bucket (or
partition) taking T(size) by (1)–(8). fifo sends whole buckets in the order
they became ready; priority sends partitions, the first layers' first, within
a credit. The next forward starts when backward ends and computes each
bucket's layers once that bucket is synchronized (--overlap_next_forward):
its waits are the exposed communication, what the trainer records as the
step's sync wait. The split of the measured compute into forward and
backward: the synthetic models sleep only in backward; a model that really
computes spends about a third in forward (FORWARD_SHARE).

α and B are measured on the spot with `netem probe` (core/launch/link_probe.h):
α is half a 1-byte round trip, B the slope of transfer time against size.

The gradsync binary is found through $GRADSYNC_BIN_DIR (set by `gradsync
compare`), then beside this file in Bazel's runfiles, then under bazel-bin/
of the checkout: `bazel build //tools:gradsync` first.

Usage:
  cost_model.py probe --link=1gbit              measure α and B (root)
  cost_model.py compare SWEEP_DIR               measured points vs predictions
  cost_model.py extrapolate [--alpha_us=25 --gbit=1 | --sweep=DIR] [--plot=x.png]
  cost_model.py compression [--workers=8 --model_mb=10 --gbit=0.1 --alpha_us=100]
  cost_model.py schedule [--workers=4 --model_mb=44.7 --buckets=4 --compute_ms=300
                          --gbits=0.1,1,10 --partition_kb=1024]   fifo vs priority
"""
import argparse
import atexit
import dataclasses
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


# --- The C++ formulas, through `gradsync predict` ----------------------------

def gradsync_binary():
    """The gradsync binary that answers the queries (see the module's
    docstring for where it is looked for)."""
    here = os.path.dirname(os.path.abspath(__file__))
    candidates = []
    if os.environ.get("GRADSYNC_BIN_DIR"):
        candidates.append(os.path.join(os.environ["GRADSYNC_BIN_DIR"], "gradsync"))
    for root in (os.environ.get("RUNFILES_DIR"), os.environ.get("TEST_SRCDIR")):
        if root:
            candidates.append(os.path.join(root, "gradsync", "tools", "gradsync"))
    candidates += [os.path.join(here, "..", "tools", "gradsync"),
                   os.path.join(here, "..", "bazel-bin", "tools", "gradsync"),
                   os.path.join("bazel-bin", "tools", "gradsync")]
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError(
        "cost_model: the gradsync binary, whose `predict` command holds the formulas, "
        f"is not at any of {candidates}; run `bazel build //tools:gradsync` or set "
        "GRADSYNC_BIN_DIR")


_ANSWERS = {}


class _Predictor:
    """One `gradsync predict` process: a JSON value per line in, its answer
    per line out. A refused query ends the process (its exit status 2 and
    one line on stderr), which becomes a ValueError here; the next query
    starts a new one."""

    def __init__(self):
        self.process = None
        self.binary = None  # None: gradsync_binary()

    def ask(self, value):
        if self.process is None or self.process.poll() is not None:
            self.process = subprocess.Popen(
                [self.binary or gradsync_binary(), "predict"], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            self.process.stdin.write(json.dumps(value) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except BrokenPipeError:
            line = ""
        if line:
            return json.loads(line)
        process, self.process = self.process, None
        process.stdin.close()
        error = process.stderr.read().strip()
        process.wait()
        process.stdout.close()
        process.stderr.close()
        raise ValueError(error or f"gradsync predict ended with status {process.returncode}")

    def close(self):
        """Ends the process: the end of its input is its end."""
        process, self.process = self.process, None
        if process is not None:
            process.stdin.close()
            process.wait()
            process.stdout.close()
            process.stderr.close()


_PREDICTOR = _Predictor()
atexit.register(_PREDICTOR.close)


def use_binary(path):
    """Asks `path` (a gradsync binary) from now on, so that a sweep's
    predictions come from the build its jobs ran (scaling.py's --bin_dir);
    a path that is not an executable file leaves gradsync_binary()'s."""
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return
    _PREDICTOR.close()
    _PREDICTOR.binary = path
    _ANSWERS.clear()
def ask(query):
    """The C++ cost model's answer to one query (`gradsync predict --help`
    lists the formulas and their inputs). Answers are remembered."""
    key = json.dumps(query, sort_keys=True)
    if key not in _ANSWERS:
        _ANSWERS[key] = _PREDICTOR.ask(query)
    return _ANSWERS[key]


def ask_many(queries):
    """The answers to a list of queries, asked as one batch."""
    keys = [json.dumps(q, sort_keys=True) for q in queries]
    missing = {k: q for k, q in zip(keys, queries) if k not in _ANSWERS}
    if missing:
        answers = _PREDICTOR.ask(list(missing.values()))
        _ANSWERS.update(zip(missing, answers))
    return [_ANSWERS[k] for k in keys]


def _link(link, prefix=""):
    return {f"{prefix}alpha_s": link.alpha_s, f"{prefix}bytes_per_s": link.bandwidth}


# Each formula is a query builder (`*_query`, for ask_many's batches) and a
# function that asks it alone, with the arguments Python always had.

# --- The all-reduce family: (1), (6), (7), (8), (10) --------------------------

# gradsync's eager prefix before a peer's clear to send (allreduce/
# algorithms/peer_exchange.h, --allreduce_eager_kb).
EAGER_BYTES = 256 << 10


def ring_query(n, size, link):
    return dict(formula="ring", n=n, bytes=size, **_link(link))


def ring_time(n, size, link):
    """(1): one ring all-reduce of `size` bytes among n ranks."""
    return ask(ring_query(n, size, link))["seconds"]


def halving_doubling_query(n, size, link, eager_bytes=0):
    return dict(formula="halving_doubling", n=n, bytes=size, eager_bytes=eager_bytes,
                **_link(link))


def halving_doubling_time(n, size, link, eager_bytes=0):
    """(6): one halving-doubling all-reduce; with the clear to send's eager
    prefix `eager_bytes` (gradsync's), the steps above it wait for it."""
    return ask(halving_doubling_query(n, size, link, eager_bytes))["seconds"]


def tree_query(n, size, link, eager_bytes=0):
    return dict(formula="tree", n=n, bytes=size, eager_bytes=eager_bytes, **_link(link))


def tree_time(n, size, link, eager_bytes=0):
    """(7): one double-binary-tree all-reduce of `size` bytes among n ranks."""
    return ask(tree_query(n, size, link, eager_bytes))["seconds"]


def hierarchical_query(n, ranks_per_node, size, link, intra=None, shared=True,
                       eager_bytes=0):
    return dict(formula="hierarchical", n=n, ranks_per_node=max(1, ranks_per_node),
                bytes=size, shared_link=shared, eager_bytes=eager_bytes,
                **_link(link), **_link(intra or link, "intra_"))


def hierarchical_time(n, ranks_per_node, size, link, intra=None, shared=True,
                      eager_bytes=0):
    """(8): R ranks per node, across nodes over `link`, shared by the node's R
    ranks (`shared`) or one each; `intra` is the path inside a node (default:
    the same link)."""
    return ask(hierarchical_query(n, ranks_per_node, size, link, intra, shared,
                                  eager_bytes))["seconds"]


def allreduce_query(n, size, link, eager_bytes=EAGER_BYTES):
    return dict(formula="allreduce", n=n, bytes=size, eager_bytes=eager_bytes, **_link(link))


def allreduce_pick(n, size, link, eager_bytes=EAGER_BYTES):
    """--sync=allreduce's choice and its predicted time: the lowest of (1),
    (6) and (7), the ring on a tie (allreduce/allreduce_table.h)."""
    answer = ask(allreduce_query(n, size, link, eager_bytes))
    return answer["algorithm"], answer["seconds"]


def allgather_query(n, blob_bytes, link):
    return dict(formula="allgather", n=n, blob_bytes=blob_bytes, **_link(link))


def allgather_time(n, blob_bytes, link):
    """(10): ring all-gather of one blob per rank, each behind its frame."""
    return ask(allgather_query(n, blob_bytes, link))["seconds"]


def _tree_shape(n):
    return ask({"formula": "tree_shape", "n": n})


def double_binary_tree(n, tree):
    """{rank: (parent, [children])} of tree `tree` (0 or 1), as
    allreduce/algorithms/tree_allreduce.h builds it."""
    nodes = _tree_shape(n)["trees"][tree]
    return {rank: (parent, list(children)) for rank, (parent, children) in enumerate(nodes)}


def tree_edges(trees, n):
    """Per rank, its edges (parent and children) over both trees."""
    return [sum((t[r][0] >= 0) + len(t[r][1]) for t in trees) for r in range(n)]


def tree_rank_costs(n):
    """Per rank of the double binary trees, (E_r, H_r) of (7): its tree edges
    over both trees and the hops its link's last byte still travels; each
    pair once, ascending."""
    return [tuple(pair) for pair in _tree_shape(n)["rank_costs"]]


# --- The parameter server: (2)–(5) ----------------------------------------------

def _last_key(size, last_key):
    return min(size, PS_CHUNK_BYTES) if last_key is None else last_key


def ps_query(n, size, link, largest_share, last_key=None, message_bytes=PS_MESSAGE_BYTES,
             reduce_bytes_per_s=None):
    return dict(formula="ps", n=n, bytes=size, largest_share=largest_share,
                last_key_bytes=_last_key(size, last_key), message_bytes=message_bytes,
                reduce_bytes_per_s=reduce_bytes_per_s or 0, **_link(link))


def ps_time(n, size, link, largest_share, last_key=None, message_bytes=PS_MESSAGE_BYTES,
            reduce_bytes_per_s=None):
    """(2): push and pull of `size` bytes through separate servers, the
    busiest of which holds `largest_share` of the bytes; `last_key` (0: no
    tail; default: the default key or less) and `message_bytes` make the
    tail; `reduce_bytes_per_s` (γ) bounds the busiest server's sums."""
    return ask(ps_query(n, size, link, largest_share, last_key, message_bytes,
                        reduce_bytes_per_s))["seconds"]


def colocated_ps_query(n, size, link, last_key=None, message_bytes=PS_MESSAGE_BYTES,
                       largest_share=None):
    return dict(formula="ps_colocated", n=n, bytes=size,
                largest_share=1.0 / n if largest_share is None else largest_share,
                last_key_bytes=_last_key(size, last_key), message_bytes=message_bytes,
                **_link(link))


def colocated_ps_time(n, size, link, last_key=None, message_bytes=PS_MESSAGE_BYTES,
                      largest_share=None):
    """(3): every worker also serves a share of the keys (1/n balanced)."""
    return ask(colocated_ps_query(n, size, link, last_key, message_bytes,
                                  largest_share))["seconds"]


def byteps_query(n, k, size, link):
    return dict(formula="byteps", n=n, separate=k, bytes=size, **_link(link))


def byteps_time(n, k, size, link):
    """(4): BytePS's optimum with n workers that also serve and k separate
    servers (bandwidth term only; no tail)."""
    return ask(byteps_query(n, k, size, link))["seconds"]


def mixed_ps_query(n, colocated, separate, size, link, last_key=None,
                   message_bytes=PS_MESSAGE_BYTES, largest_share=None, separate_share=None):
    k = colocated + separate
    share = (1.0 / k if k > 0 else 0.0) if largest_share is None else largest_share
    return dict(formula="ps_mixed", n=n, colocated=colocated, separate=separate, bytes=size,
                colocated_share=share,
                separate_share=share if separate_share is None else separate_share,
                last_key_bytes=_last_key(size, last_key), message_bytes=message_bytes,
                **_link(link))


def mixed_ps_time(n, colocated, separate, size, link, last_key=None,
                  message_bytes=PS_MESSAGE_BYTES, largest_share=None, separate_share=None):
    """(5): workers 0..colocated−1 also serve, beside `separate` servers of
    their own; every server holds `largest_share` of the bytes at most
    (1/K balanced). With `separate_share` (unequal shares, (5b)),
    `largest_share` is the serving workers' servers' largest and
    `separate_share` the separate servers' largest."""
    return ask(mixed_ps_query(n, colocated, separate, size, link, last_key, message_bytes,
                              largest_share, separate_share))["seconds"]


def placement_shares_query(n, colocated, separate, partition="equal"):
    return {"formula": "server_shares", "n": n, "colocated": colocated,
            "separate": separate, "partition": partition}


def placement_shares(n, colocated, separate, partition="equal"):
    """(5b): the target share of one serving worker's server and of one
    separate server (ServerShares in ps/client/partitioner.h)."""
    shares = ask(placement_shares_query(n, colocated, separate, partition))["shares"]
    return shares[0], shares[-1]


def placed_shares_query(size, n, colocated, separate, partition="equal",
                        chunk=PS_CHUNK_BYTES):
    return {"formula": "placed_shares", "n": n, "colocated": colocated,
            "separate": separate, "partition": partition, "bytes": size,
            "chunk_bytes": chunk}


def placed_shares(size, n, colocated, separate, partition="equal", chunk=PS_CHUNK_BYTES):
    """The largest share the serving workers' servers and the separate
    servers end up with when `size` bytes, cut into keys of at most `chunk`,
    are placed toward their (5b) targets (ps/cost_model.h's PlaceShares)."""
    answer = ask(placed_shares_query(size, n, colocated, separate, partition, chunk))
    return answer["colocated_share"], answer["separate_share"]


def balanced_share_query(size, k, chunk=PS_CHUNK_BYTES):
    return {"formula": "balanced_share", "bytes": size, "servers": k, "chunk_bytes": chunk}


def balanced_share(size, k, chunk=PS_CHUNK_BYTES):
    """The busiest of k servers' share of `size` bytes cut into keys of at
    most `chunk` (ps/cost_model.h's BalancedLargestShare): at least one
    key's share, however large k is."""
    return ask(balanced_share_query(size, k, chunk))["share"]


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


# --- One step under a send order: (14) ------------------------------------------

SCHEDULES = ("fifo", "priority")
# --schedule's default (tools/train_flags.cc), for a point whose job did not
# say; `gradsync compare` reads what each job ran from its manifest.
DEFAULT_SCHEDULE = "fifo"
# The part of a real model's compute (forward and backward) that is forward:
# backward computes the gradients of both the activations and the weights,
# about twice the forward's work. The synthetic models sleep in backward only.
FORWARD_SHARE = 1 / 3


def step_query(bucket_query, bucket_bytes, backward_s, forward_s, schedule="both",
               partition_bytes=0, credit_bytes=0, overlap_next_forward=True):
    """(14)'s query: one step of buckets `bucket_bytes` in forward order (the
    first layers' bucket first), each charged the time `bucket_query` (any
    of ring_query ... mixed_ps_query, its size left out; a PS query's last
    key is the step's tail) would answer for its size. `backward_s` and
    `forward_s`: a list per bucket, or a total spread by bytes."""
    query = {k: v for k, v in bucket_query.items() if k != "bytes"}
    query.update(formula="step", sync=bucket_query["formula"],
                 bucket_bytes=list(bucket_bytes), backward_s=backward_s, forward_s=forward_s,
                 schedule=schedule, partition_bytes=partition_bytes,
                 credit_bytes=credit_bytes, overlap_next_forward=overlap_next_forward)
    return query


def scheduled_step(bucket_query, bucket_bytes, backward_s, forward_s, schedule="both",
                   partition_bytes=0, credit_bytes=0, overlap_next_forward=True):
    """(14): {"fifo": {...}, "priority": {...}} (the one asked, or both),
    each with step_s, exposed_s, comm_s, comm_end_s, transfers and
    bucket_done_s (`gradsync predict --help`)."""
    return ask(step_query(bucket_query, bucket_bytes, backward_s, forward_s, schedule,
                          partition_bytes, credit_bytes, overlap_next_forward))


def bucket_query_of(strategy, n, link, ranks_per_node=1):
    """The all-reduce family's per-bucket query for (14), its size left out."""
    if strategy == "ring":
        return ring_query(n, 0, link)
    if strategy == "halving_doubling":
        return halving_doubling_query(n, 0, link, EAGER_BYTES)
    if strategy == "tree":
        return tree_query(n, 0, link, EAGER_BYTES)
    if strategy == "hierarchical":
        return hierarchical_query(n, ranks_per_node, 0, link, eager_bytes=EAGER_BYTES)
    if strategy == "allreduce":
        return allreduce_query(n, 0, link)
    raise ValueError(f"no cost model for strategy {strategy}")


def flag_on(value):
    """A boolean flag's text as Abseil reads it."""
    return str(value).lower() not in ("false", "0", "no", "f", "n")


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
        # The compressed buckets' queue is fifo's whatever ran: (14) has no
        # codec time.
        return {
            "predicted_comm_ms": 1000 * comm,
            "predicted_exposed_ms": 1000 * exposed,
            "predicted_step_ms": base_step_ms + 1000 * exposed,
            "predicted_schedule": "fifo",
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
        bucket_query = ps_query(n, 0, link, share, last_key=last_key, message_bytes=message)
        comm = ps_time(n, sum(bucket_bytes), link, share, last_key=last_key,
                       message_bytes=message)
    elif strategy == "ps-colocated":
        bucket_query = colocated_ps_query(n, 0, link, last_key=last_key, message_bytes=message)
        comm = colocated_ps_time(n, sum(bucket_bytes), link, last_key=last_key,
                                 message_bytes=message)
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
        bucket_query = mixed_ps_query(n, colocated, k - colocated, 0, link, last_key=last_key,
                                      message_bytes=message, largest_share=colocated_share,
                                      separate_share=separate_share)
        comm = mixed_ps_time(n, colocated, k - colocated, sum(bucket_bytes), link,
                             last_key=last_key, message_bytes=message,
                             largest_share=colocated_share, separate_share=separate_share)
    else:
        ranks_per_node = point.get("ranks_per_node", 1)
        bucket_query = bucket_query_of(strategy, n, link, ranks_per_node)
        comm = sum(sync_time(strategy, n, k, size, link, ranks_per_node=ranks_per_node)
                   for size in bucket_bytes)
    # (14): the step under both schedules, the one that ran reported as the
    # prediction. What ran: the job's own record (`gradsync compare` puts it
    # in the point), else the flag, else the worker's default. A partition and
    # credit of 0 are the strategy's own: the values it recorded, where the
    # point has them, else whole buckets (the all-reduces) or the PS's keys,
    # and one partition in flight.
    schedule = point.get("schedule") or flags.get("schedule") or DEFAULT_SCHEDULE
    partition_bytes = (int(flags.get("partition_kb", 0)) * 1024
                       or point.get("partition_bytes")
                       or (chunk if strategy.startswith("ps") else 0))
    credit_bytes = int(flags.get("credit_kb", 0)) * 1024 or point.get("credit_bytes") or 0
    compute_s = base_compute_ms / 1000
    forward_s = 0.0 if point.get("compute_ms") else FORWARD_SHARE * compute_s
    steps = scheduled_step(bucket_query, list(reversed(bucket_bytes)), compute_s - forward_s,
                           forward_s, "both", partition_bytes, credit_bytes,
                           flag_on(flags.get("overlap_next_forward", "true")))
    prediction = {
        "predicted_comm_ms": 1000 * comm,
        "predicted_exposed_ms": 1000 * steps[schedule]["exposed_s"],
        "predicted_step_ms": base_step_ms + 1000 * steps[schedule]["exposed_s"],
        "predicted_schedule": schedule,
    }
    for name in SCHEDULES:
        prediction[f"predicted_{name}_exposed_ms"] = 1000 * steps[name]["exposed_s"]
        prediction[f"predicted_{name}_step_ms"] = base_step_ms + 1000 * steps[name]["exposed_s"]
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


def schedule_rows(n, model_bytes, buckets, compute_s, links, alpha_s=100e-6,
                  partition_bytes=1 << 20, credit_bytes=0, forward_share=FORWARD_SHARE):
    """(14) over link rates: per bandwidth (bytes/s) in `links`, the ring's and
    PS K = N's predicted (fifo step, priority step, fifo exposed, priority
    exposed) in seconds, for a model of `buckets` equal buckets whose
    compute is `compute_s` (a `forward_share` of it in forward), asked as
    one batch."""
    sizes = [model_bytes / buckets] * buckets
    forward = forward_share * compute_s
    queries = []
    for bandwidth in links:
        link = Link(alpha_s, bandwidth)
        for bucket_query in (ring_query(n, 0, link),
                             ps_query(n, 0, link, 1.0 / n, last_key=min(
                                 model_bytes, partition_bytes or PS_CHUNK_BYTES))):
            queries.append(step_query(bucket_query, sizes, compute_s - forward, forward,
                                      "both", partition_bytes, credit_bytes))
    answers = ask_many(queries)
    rows = []
    for i, bandwidth in enumerate(links):
        row = {"bytes_per_s": bandwidth}
        for j, name in enumerate(("ring", "ps")):
            steps = answers[2 * i + j]
            row[name] = tuple(steps[s][m] for m in ("step_s", "exposed_s")
                              for s in SCHEDULES)
        rows.append(row)
    return rows


def print_schedule_table(n, model_bytes, buckets, compute_s, gbits, alpha_s, partition_bytes,
                         credit_bytes, forward_share):
    """Where priority gains: (14)'s step time under fifo and priority, ring
    and PS K = N, at each link rate."""
    rows = schedule_rows(n, model_bytes, buckets, compute_s, [g * 1e9 / 8 for g in gbits],
                         alpha_s, partition_bytes, credit_bytes, forward_share)
    print(f"{model_bytes / 1e6:.1f} MB in {buckets} buckets, N = {n}, compute "
          f"{1000 * compute_s:.0f} ms ({100 * forward_share:.0f}% forward), α = "
          f"{alpha_s * 1e6:.0f} us, partitions of {partition_bytes / 1024:.0f} KiB, credit "
          f"{credit_bytes / 1024:.0f} KiB (0: one partition); ms a step (exposed)")
    table = []
    for row in rows:
        cells = [f"{row['bytes_per_s'] * 8 / 1e9:g}"]
        for name in ("ring", "ps"):
            fifo, priority, fifo_exposed, priority_exposed = row[name]
            cells += [f"{1000 * fifo:.1f} ({1000 * fifo_exposed:.1f})",
                      f"{1000 * priority:.1f} ({1000 * priority_exposed:.1f})",
                      f"{100 * (priority / fifo - 1):+.0f}%"]
        table.append(tuple(cells))
    print_table(("Gbit/s", "ring fifo", "ring priority", "change", "PS K=N fifo",
                 "PS K=N priority", "change"), table)


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
    every N in EXTRAPOLATION_N, asked of the C++ in two batches (the
    servers' shares, then the times). Buckets matter only for the
    all-reduces' latency terms: each bucket is its own all-reduce. The PS's
    servers hold whole keys of at most `chunk` bytes (balanced_share): past
    S/chunk servers more of them do not help, and the busiest still sends N
    copies."""
    buckets = max(1, math.ceil(model_bytes / (bucket_mb * MIB)))
    bucket = model_bytes / buckets
    last_key = min(model_bytes, chunk)

    def servers(n):
        return {"ps K=1": 1, "ps K=N/4": max(1, n // 4), "ps K=N": n}

    share_queries = {(n, k): balanced_share_query(model_bytes, k, chunk)
                     for n in EXTRAPOLATION_N for k in servers(n).values()}
    shares = dict(zip(share_queries, (a["share"] for a in ask_many(list(share_queries.values())))))
    queries = {}
    for n in EXTRAPOLATION_N:
        queries[(n, "ring")] = (buckets, ring_query(n, bucket, link))
        for name, k in servers(n).items():
            queries[(n, name)] = (1, ps_query(n, model_bytes, link, shares[(n, k)],
                                              last_key=last_key))
        queries[(n, "halving_doubling")] = (buckets, halving_doubling_query(
            n, bucket, link, EAGER_BYTES))
        queries[(n, "tree")] = (buckets, tree_query(n, bucket, link, EAGER_BYTES))
        queries[(n, "ps colocated")] = (1, colocated_ps_query(
            n, model_bytes, link, last_key=last_key, largest_share=shares[(n, n)]))
    answers = ask_many([query for _, query in queries.values()])
    rows = {n: {} for n in EXTRAPOLATION_N}
    for ((n, name), (count, _)), answer in zip(queries.items(), answers):
        rows[n][name] = 1000 * count * answer["seconds"]
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
    w = sub.add_parser("schedule", help="(14): fifo against priority over link rates")
    w.add_argument("--workers", type=int, default=4)
    w.add_argument("--model_mb", type=float, default=44.7, help="ResNet-18's gradient")
    w.add_argument("--buckets", type=int, default=4, help="equal buckets")
    w.add_argument("--compute_ms", type=float, default=300.0, help="forward and backward")
    w.add_argument("--forward_share", type=float, default=FORWARD_SHARE)
    w.add_argument("--gbits", default="0.1,0.5,1,2,10", help="link rates")
    w.add_argument("--alpha_us", type=float, default=100.0)
    w.add_argument("--partition_kb", type=int, default=1024)
    w.add_argument("--credit_kb", type=int, default=0, help="0: one partition in flight")
    args = parser.parse_args()

    if args.command == "schedule":
        print_schedule_table(args.workers, args.model_mb * 1e6, args.buckets,
                             args.compute_ms / 1000, [float(g) for g in args.gbits.split(",")],
                             args.alpha_us / 1e6, args.partition_kb * 1024,
                             args.credit_kb * 1024, args.forward_share)
        return

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
