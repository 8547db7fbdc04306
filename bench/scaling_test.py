#!/usr/bin/python3
"""Tests of bench/scaling.py's sweep parsing and aggregation and of
bench/cost_model.py's formulas (run by `bazel test //bench:all`)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cost_model  # noqa: E402
import scaling  # noqa: E402


class SweepTest(unittest.TestCase):
    def test_flag_sets(self):
        self.assertEqual(scaling.sweep_sets(""), [""])
        self.assertEqual(
            scaling.sweep_sets("--ps_consistency=bsp;--ps_consistency=ssp  --ps_staleness=2"),
            ["--ps_consistency=bsp", "--ps_consistency=ssp --ps_staleness=2"])

    def test_bad_flag_sets_exit(self):
        for spec in ("ps_chunk_kb=128", "--a=1;;--a=2", "--a=1; x"):
            with self.assertRaises(SystemExit, msg=spec):
                scaling.sweep_sets(spec)

    def test_every_strategy_point_runs_once_per_flag_set(self):
        class Args:
            models = "custom:1:4"
            links = "loopback"
            bucket_mb = "25"
            compute_ms = "0"
            workers = "2,4"
            strategies = "ring,ps"
            servers = "1,N"
            sweep = "--ps_chunk_kb=128;--ps_chunk_kb=1024"
        points = scaling.enumerate_points(Args)
        self.assertEqual(points[0]["strategy"], "local")
        self.assertEqual(points[0]["sweep"], "")
        # N = 2: ring, ps K=1, ps K=2; N = 4: ring, ps K=1, ps K=4; each twice.
        self.assertEqual(len(points), 1 + 2 * 6)
        labels = {scaling.label(p) for p in points}
        self.assertEqual(len(labels), len(points), "labels must be distinct")
        self.assertIn("custom-1MB_loopback_b25_c0_ps_n4_k4_ps_chunk_kb=128", labels)

    def test_ranks_sharing_a_host_are_labelled_and_the_launchers_flag(self):
        import json
        import tempfile
        from unittest import mock

        class Args:
            models = "custom:1:4"
            links = "100mbit"
            bucket_mb = "25"
            compute_ms = "0"
            workers = "4"
            strategies = "ring"
            servers = "N"
            sweep = ""
            ranks_per_host = 2
            deadline_s = 60
            extra = []
            batch_size = 8
            steps = 5
            warmup = 1
        points = scaling.enumerate_points(Args)
        self.assertEqual([scaling.label(p) for p in points],
                         ["custom-1MB_100mbit_b25_c0_local_n1_k0",
                          "custom-1MB_100mbit_b25_c0_ring_n4_k0_rph2"])
        ran = {}

        def fake_run(argv, stdout, stderr, timeout, env=None):
            ran["argv"] = argv
            with open(os.path.join(run_dir, "summary.json"), "w") as f:
                json.dump({"step_ms": 1}, f)
            return mock.Mock(returncode=0)

        with tempfile.TemporaryDirectory() as run_dir, \
                mock.patch.object(scaling.subprocess, "run", fake_run):
            scaling.run_job(points[1], run_dir, Args)
            self.assertIn("--ranks_per_host=2", ran["argv"])
            scaling.run_job(points[0], run_dir, Args)  # one worker: no host to share
            self.assertFalse([a for a in ran["argv"] if a.startswith("--ranks_per_host")])

    def test_every_strategy_runs_with_every_compression_it_has(self):
        class Args:
            models = "custom:1:4"
            links = "loopback"
            bucket_mb = "25"
            compute_ms = "0"
            workers = "4"
            strategies = "ring,tree,ps"
            servers = "N"
            sweep = ""
            compressions = "none,fp16,topk:0.01"
        points = scaling.enumerate_points(Args)[1:]
        # ring and ps with all three; tree without fp16 (not built for it).
        self.assertEqual(sorted(scaling.strategy_text(p) for p in points),
                         ["ps", "ps fp16", "ps topk:0.01", "ring", "ring fp16",
                          "ring topk:0.01", "tree", "tree topk:0.01"])
        labels = {scaling.label(p) for p in points}
        self.assertEqual(len(labels), len(points), "labels must be distinct")
        self.assertIn("custom-1MB_loopback_b25_c0_ring_n4_k0_topk0.01", labels)

    def test_a_bad_compression_exits_with_one_message(self):
        with self.assertRaises(SystemExit) as raised:
            scaling.compressions_of("none,topk:2")
        self.assertIn("topk:2", str(raised.exception))

    def test_mixed_placement_points_span_c_workers_and_k_servers(self):
        class Args:
            models = "custom:1:4"
            links = "loopback"
            bucket_mb = "25"
            compute_ms = "0"
            workers = "4"
            strategies = "ps-mixed"
            servers = "2,N"
            colocated = "1,N/2,N"
            sweep = ""
        points = scaling.enumerate_points(Args)[1:]
        # c = 1: K = 2, 4; c = 2: K = 2, 4; c = 4: K = 4 (K < c is no layout).
        self.assertEqual([(p["colocated"], p["servers"]) for p in points],
                         [(1, 2), (1, 4), (2, 2), (2, 4), (4, 4)])
        self.assertIn("custom-1MB_loopback_b25_c0_ps-mixed_n4_k4_colocated2",
                      {scaling.label(p) for p in points})

    def test_real_models_run_once_without_emulated_compute(self):
        class Args:
            models = "resnet18,custom:1:4"
            links = "loopback"
            bucket_mb = "25"
            compute_ms = "0,50"
            workers = "2"
            strategies = "ring"
            servers = "1"
            sweep = ""
        points = scaling.enumerate_points(Args)
        resnet = [p for p in points if p["model"] == "resnet18"]
        # One group (local + ring) for the real model; the sleeping one has two.
        self.assertEqual(len(resnet), 2)
        self.assertEqual({p["compute_ms"] for p in resnet}, {0.0})
        self.assertEqual(resnet[0]["model_flags"], ["--model=resnet18"])
        self.assertEqual(resnet[0]["model_bytes"], 11_173_962 * 4)
        self.assertEqual(len(points), 2 + 2 * 2)

    @staticmethod
    def repeat(step_ms, machine_busy=0.3, retrans=0):
        return dict(step_ms=step_ms, measured_compute_ms=1, exposed_ms=step_ms / 2,
                    samples_per_s=100, bytes_per_rank=10, busiest_link_bytes=20,
                    largest_server_share=0.5, retrans_segments=retrans, rto_timeouts=0,
                    retrans_percent=0, port_drops=0, job_cpu_fraction=0.2,
                    machine_busy=machine_busy, machine_busy_unniced=machine_busy)

    def test_aggregate_reports_median_and_spread(self):
        repeats = [self.repeat(v, retrans=r) for v, r in ((30.0, 5), (10.0, 1), (20.0, 9))]
        point = scaling.aggregate({"strategy": "ring"}, repeats)
        self.assertEqual(point["repeats"], 3)
        self.assertEqual(point["step_ms"], 20.0)
        self.assertEqual(point["step_ms_min"], 10.0)
        self.assertEqual(point["step_ms_max"], 30.0)
        self.assertEqual(point["exposed_ms"], 10.0)
        self.assertEqual(point["retrans_segments"], 5)
        self.assertEqual(point["retrans_segments_max"], 9)
        self.assertFalse(point["cpu_bound"])

    def test_unmeasured_figures_stay_empty(self):
        repeats = [self.repeat(10.0), self.repeat(12.0)]
        for r in repeats:
            r["retrans_segments"] = None
        point = scaling.aggregate({"strategy": "ring"}, repeats)
        self.assertIsNone(point["retrans_segments"])
        self.assertIsNone(point["retrans_segments_max"])
        self.assertEqual(point["step_ms"], 11.0)

    def test_a_point_is_cpu_bound_when_any_repeat_ran_on_a_busy_machine(self):
        repeats = [self.repeat(10.0, 0.2), self.repeat(11.0, 0.9), self.repeat(12.0, 0.3)]
        self.assertTrue(scaling.aggregate({"strategy": "ps"}, repeats)["cpu_bound"])

    def test_the_measured_steps_busy_share_decides_where_recorded(self):
        # Start-up kept the machine busy, the steps did not: not CPU-bound.
        repeats = [self.repeat(10.0, 0.9), self.repeat(11.0, 0.8)]
        for r in repeats:
            r["machine_busy_unniced_timed"] = 0.4
        point = scaling.aggregate({"strategy": "ps"}, repeats)
        self.assertFalse(point["cpu_bound"])
        self.assertEqual(point["machine_busy_unniced_timed_max"], 0.4)
        # And the other way round.
        for r in repeats:
            r["machine_busy_unniced_timed"] = 0.75
        self.assertTrue(scaling.aggregate({"strategy": "ps"}, repeats)["cpu_bound"])

    def test_the_window_opens_after_the_warm_up_and_closes_at_the_last_step(self):
        import tempfile
        import time
        step = '{"type":"step","rank":0,"step":%d}\n'
        with tempfile.TemporaryDirectory() as run_dir:
            path = os.path.join(run_dir, "worker0.jsonl")
            with open(path, "w") as f:
                # One warm-up step, a line of another type, half a line.
                f.write(step % 0 + '{"type":"epoch"}\n' + '{"type":"st')
            window = scaling.MeasuredStepsWindow(run_dir, warmup=2, steps=4)

            def wait_for(condition):
                deadline = time.monotonic() + 10
                while not condition():
                    self.assertLess(time.monotonic(), deadline, "the window's thread")
                    window.stop.wait(0.01)

            wait_for(lambda: window.lines == 1)
            self.assertIsNone(window.start)
            with open(path, "a") as f:
                f.write('ep","rank":0,"step":1}\n')
            wait_for(lambda: window.start is not None)
            self.assertEqual(window.lines, 2)
            with open(path, "a") as f:
                f.write(step % 2 + step % 3)
            wait_for(lambda: window.end is not None)
            cpu = window.finish()
        self.assertEqual(set(cpu), {"measured_steps_wall_s", "machine_busy_timed",
                                    "machine_busy_unniced_timed"})
        for share in ("machine_busy_timed", "machine_busy_unniced_timed"):
            self.assertGreaterEqual(cpu[share], 0)
            self.assertLessEqual(cpu[share], 1)

    def test_a_window_that_never_closes_records_nothing(self):
        import tempfile
        with tempfile.TemporaryDirectory() as run_dir:
            window = scaling.MeasuredStepsWindow(run_dir, warmup=2, steps=4)
            self.assertEqual(window.finish(), {})

    def test_machine_ticks_count_iowait_as_idle_and_niced_apart(self):
        total, idle, niced = scaling.machine_cpu_ticks("cpu  10 7 5 73 5 0 0 0 0 0\ncpu0 1 2 3 4\n")
        self.assertEqual(total, 100)
        self.assertEqual(idle, 78)
        self.assertEqual(niced, 7)

    def test_tcp_totals_count_separate_servers_and_colocated_ones_once(self):
        def process(retrans, timeouts):
            return {"tcp": {"retrans_segments": retrans, "timeouts": timeouts,
                            "out_segments": 1000}}
        servers = [{"process": process(7, 1)}, {"process": process(3, 0)}]
        summary = {"ranks": [{"process": process(10, 2), "sync": {"server_summaries": servers}},
                             {"process": process(20, 0), "sync": {}}]}
        self.assertEqual(scaling.tcp_totals(summary), (40, 3, 4000))
        summary["ranks"][0]["sync"]["colocate"] = True
        self.assertEqual(scaling.tcp_totals(summary), (30, 2, 2000))
        # A rank whose counters were unreadable adds nothing.
        summary["ranks"][1]["process"] = {"tcp_error": "cannot read"}
        self.assertEqual(scaling.tcp_totals(summary), (10, 2, 1000))


    @staticmethod
    def mixed_summary():
        """N = 3, workers 0 and 1 serve, one separate server (K = 3); 2
        steps; every worker pushes 30 bytes to each server a step and pulls
        as many."""
        def server(index, retrans):
            return {"server": index, "steps": 2, "bytes_in": 2 * 90, "bytes_out": 2 * 90,
                    "process": {"tcp": {"retrans_segments": retrans, "timeouts": 0,
                                        "out_segments": 100}}}
        servers = [server(0, 1), server(1, 2), server(2, 4)]
        ranks = []
        for r in range(3):
            sync = {"steps": 2, "colocated_servers": 2, "bytes_to_server": [60, 60, 60],
                    "bytes_from_server": [60, 60, 60]}
            if r == 0:
                sync["server_summaries"] = servers
            ranks.append({"rank": r, "bytes_sent_per_step": 90, "bytes_recv_per_step": 90,
                          "process": {"tcp": {"retrans_segments": 10 * (r + 1), "timeouts": 1,
                                              "out_segments": 1000}},
                          "sync": sync})
        return {"ranks": ranks}

    def test_busiest_link_of_a_mixed_placement_is_a_serving_worker(self):
        # A serving worker: 90 out of its own, less 30 to its own server,
        # plus its server's 90 less the 30 back to itself: 120 = S + (N−2)·f·S
        # with S = 90, f = 1/3. The separate server: 90; the other worker: 90.
        self.assertEqual(scaling.busiest_link_bytes(self.mixed_summary()), 120)

    def test_shares_by_kind_of_server_come_from_the_summary(self):
        summary = self.mixed_summary()
        self.assertEqual(scaling.server_shares_by_kind(summary), (None, None, None))
        summary["ranks"][0]["sync"].update(partition="balanced", server_key_bytes=[10, 30, 60])
        self.assertEqual(scaling.server_shares_by_kind(summary), ("balanced", 0.3, 0.6))
        del summary["ranks"][0]["sync"]["partition"]  # a job from before --ps_partition
        self.assertEqual(scaling.server_shares_by_kind(summary)[0], "equal")

    def test_tcp_totals_of_a_mixed_placement_count_the_separate_server_only(self):
        # Workers 10 + 20 + 30; servers 0 and 1 share workers' namespaces;
        # the separate server 2 adds its 4.
        self.assertEqual(scaling.tcp_totals(self.mixed_summary()), (64, 3, 3100))


class TrainingCommandTest(unittest.TestCase):
    """A PyTorch program after `--` as the jobs' workers (no job runs)."""
    COMMAND = ["/usr/bin/python3", "examples/pytorch/resnet18_cifar10.py", "--random_data",
               "--steps=12"]

    class Args:
        models = "mlp,cnn"  # not used: the command is the model
        links = "100mbit"
        bucket_mb = "25,5"
        compute_ms = "0,50"
        workers = "4"
        strategies = "ring,ps"
        servers = "N"
        sweep = ""
        extra = None
        warmup = 3
        deadline_s = 60

    def args(self):
        args = self.Args()
        args.extra = list(self.COMMAND)
        return args

    def test_the_command_is_the_model_one_group_per_link(self):
        points = scaling.enumerate_points(self.args())
        self.assertEqual([(p["strategy"], p["workers"], p["servers"]) for p in points],
                         [("local", 1, 0), ("ring", 4, 0), ("ps", 4, 4)])
        self.assertEqual({p["model"] for p in points}, {"pytorch-resnet18_cifar10"})
        self.assertEqual({tuple(p["model_flags"]) for p in points}, {()})
        self.assertIsNone(scaling.worker_command(["--lr=0.1", "x.py"]))

    def test_a_job_runs_the_command_with_the_strategy_in_its_environment(self):
        import json
        import tempfile
        from unittest import mock
        ran = {}

        def fake_run(argv, stdout, stderr, timeout, env):
            ran["argv"], ran["env"] = argv, env
            with open(os.path.join(run_dir, "summary.json"), "w") as f:
                json.dump({"step_ms": 1}, f)
            return mock.Mock(returncode=0)

        args = self.args()
        args.sweep = "--ps_stream_window_kb=256"
        points = scaling.enumerate_points(args)
        with tempfile.TemporaryDirectory() as run_dir, \
                mock.patch.object(scaling.subprocess, "run", fake_run):
            summary = scaling.run_job(points[2], run_dir, args)
            with open(os.path.join(run_dir, "launch.log")) as f:
                logged = f.read()
        self.assertEqual(summary["step_ms"], 1)
        argv = ran["argv"]
        self.assertIn("--servers=4", argv)
        self.assertIn("--netem=100mbit", argv)
        self.assertEqual(argv[argv.index("--") + 1:], self.COMMAND)
        # Swept flags go to the launcher (its workers and servers), not after --.
        self.assertLess(argv.index("--ps_stream_window_kb=256"), argv.index("--"))
        self.assertFalse([a for a in argv if a.startswith("--sync")], argv)
        self.assertEqual(ran["env"]["GRADSYNC_SYNC"], "ps")
        self.assertEqual(ran["env"]["GRADSYNC_WARMUP_STEPS"], "3")
        self.assertIn("GRADSYNC_SYNC=ps", logged)

    def test_what_a_command_cannot_do_is_one_message(self):
        self.assertIsNone(scaling.check_command(self.COMMAND, ["local", "ring", "ps"]))
        self.assertIn("chooses --sync itself",
                      scaling.check_command(self.COMMAND + ["--sync=ps"], ["ring"]))
        self.assertIsNone(scaling.check_command(self.COMMAND, ["ps-colocated"]))
        self.assertIn("ps-mixed", scaling.check_command(self.COMMAND, ["ring", "ps-mixed"]))
        self.assertIn("--compressions",
                      scaling.check_command(self.COMMAND, ["ring"], "none,topk:0.01"))
        self.assertIsNone(scaling.check_command(self.COMMAND, ["ring"], "none"))

    def test_colocated_servers_are_the_launchers_flag(self):
        from unittest import mock
        args = self.args()
        args.strategies = "ps-colocated"
        point = scaling.enumerate_points(args)[1]
        with mock.patch.object(scaling.subprocess, "run",
                               side_effect=OSError("stop here")) as run:
            with self.assertRaises(OSError):
                import tempfile
                with tempfile.TemporaryDirectory() as run_dir:
                    scaling.run_job(point, run_dir, args)
        argv = run.call_args[0][0]
        self.assertLess(argv.index("--ps_colocate"), argv.index("--"))
        self.assertNotIn("--servers=4", argv)


class CostModelTest(unittest.TestCase):
    link = cost_model.Link(alpha_s=10e-6, bandwidth=1e8)

    def test_ring_bandwidth_term_tends_to_twice_s_over_b(self):
        size = 1e8
        self.assertEqual(cost_model.ring_time(1, size, self.link), 0.0)
        t4 = cost_model.ring_time(4, size, self.link)
        # Bandwidth-bound: the link's 1.5·S/B and one latency.
        self.assertAlmostEqual(t4, 1.5 + 10e-6, places=9)
        t1000 = cost_model.ring_time(1000, size, self.link)
        self.assertAlmostEqual(t1000, 2 * 999 / 1000 + 10e-6, places=9)

    def test_ps_with_one_server_grows_with_n_and_balanced_servers_do_not(self):
        size = 1e8
        one = [cost_model.ps_time(n, size, self.link, 1.0, last_key=0) for n in (2, 4, 8)]
        self.assertAlmostEqual(one[1] / one[0], 2.0, places=3)
        self.assertAlmostEqual(one[2] / one[0], 4.0, places=3)
        balanced = [cost_model.ps_time(n, size, self.link, 1.0 / n, last_key=0)
                    for n in (2, 4, 8)]
        for t in balanced:
            self.assertAlmostEqual(t, 1.0 + 2 * 10e-6, places=9)

    def test_colocated_ps_has_the_rings_bandwidth_term_and_its_answers_hide_a_latency(self):
        size = 1e8
        # Bandwidth-bound: the answers to earlier keys keep the link busy
        # while a push is in flight; the last answer's latency remains.
        self.assertAlmostEqual(cost_model.colocated_ps_time(4, size, self.link, last_key=0),
                               1.5 + 10e-6, places=9)
        # Its tail: the last block leaves its server for the N − 1 others.
        with_tail = cost_model.colocated_ps_time(4, size, self.link, last_key=1e6)
        self.assertAlmostEqual(with_tail - 1.5 - 10e-6, 3 * 1e6 / 1e8, places=9)
        # One node holding half the keys sends them to 3 others.
        lopsided = cost_model.colocated_ps_time(4, size, self.link, last_key=0, largest_share=0.5)
        self.assertAlmostEqual(lopsided, 2.0 + 10e-6, places=9)
        # Latency-bound (1 MB, 5 ms, N = 2): the answers wait out the push's
        # latency after the node's own pushes (half the buffer) left.
        far = cost_model.Link(alpha_s=5e-3, bandwidth=1e8)
        self.assertAlmostEqual(cost_model.colocated_ps_time(2, 1e6, far, last_key=0),
                               2 * 5e-3 + 0.5e6 / 1e8, places=12)
        # 1 MB at 1 ms: the link's 2·(N−1)/N·S/B = 10 ms hides one.
        near = cost_model.Link(alpha_s=1e-3, bandwidth=1e8)
        self.assertAlmostEqual(cost_model.colocated_ps_time(2, 1e6, near, last_key=0),
                               1e6 / 1e8 + 1e-3, places=12)

    def test_ps_tail_is_n_copies_of_the_last_block_whatever_k_is(self):
        size, key = 2.5e6, 78125 * 1.0
        for n in (4, 8):
            for share in (1.0, 1.0 / n):
                tail = (cost_model.ps_time(n, size, self.link, share, last_key=key)
                        - cost_model.ps_time(n, size, self.link, share, last_key=0))
                self.assertAlmostEqual(tail, n * key / 1e8, places=9)
        # The block is at most the server's message size (--ps_message_kb).
        tail = (cost_model.ps_time(8, 1e8, self.link, 1 / 8, last_key=4 * cost_model.MIB)
                - cost_model.ps_time(8, 1e8, self.link, 1 / 8, last_key=0))
        self.assertAlmostEqual(tail, 8 * cost_model.MIB / 1e8, places=9)

    def test_reduction_binds_only_when_slower_than_the_link(self):
        size = 1e8
        plain = cost_model.ps_time(4, size, self.link, 0.25, last_key=0)
        fast = cost_model.ps_time(4, size, self.link, 0.25, last_key=0, reduce_bytes_per_s=1e10)
        self.assertAlmostEqual(plain, fast, places=12)
        # Summing 1e8 bytes at 5e7 B/s takes 2 s, twice the link's 1 s.
        slow = cost_model.ps_time(4, size, self.link, 0.25, last_key=0, reduce_bytes_per_s=5e7)
        self.assertAlmostEqual(slow, 2.0 + 2 * 10e-6, places=9)

    def test_the_busiest_server_holds_at_least_one_chunk(self):
        mib = cost_model.MIB
        self.assertAlmostEqual(cost_model.balanced_share(100 * mib, 1, 4 * mib), 1.0)
        # 25 keys of 4 MiB on 5 servers: 5 each.
        self.assertAlmostEqual(cost_model.balanced_share(100 * mib, 5, 4 * mib), 0.2)
        # More servers than keys: the busiest still holds one whole key.
        self.assertAlmostEqual(cost_model.balanced_share(100 * mib, 1024, 4 * mib), 0.04)
        # 26 keys (the last of 2 MiB) on 4 servers: 7 full keys is the most
        # largest-first placement leaves on one server.
        self.assertAlmostEqual(cost_model.balanced_share(102 * mib, 4, 4 * mib), 28 / 102)

    def test_extrapolated_ps_with_n_servers_grows_past_the_number_of_keys(self):
        link = cost_model.Link(alpha_s=25e-6, bandwidth=1.25e8)
        rows = cost_model.extrapolate(link, cost_model.MODEL_BYTES["resnet50"])
        # ResNet-50 has 25 keys of 4 MiB: at N = 1024 one server still gets
        # N copies of a whole key in and out.
        self.assertGreater(rows[1024]["ps K=N"], 1000 * 1024 * 4 * cost_model.MIB / 1.25e8)
        self.assertLess(rows[8]["ps K=N"], rows[8]["ring"])

    def test_byteps_spectrum_spans_colocated_to_separate_servers(self):
        size = 1e8
        self.assertAlmostEqual(cost_model.byteps_time(8, 0, size, self.link), 2 * 7 / 8)
        self.assertAlmostEqual(cost_model.byteps_time(8, 8, size, self.link), 1.0)
        between = cost_model.byteps_time(8, 4, size, self.link)
        self.assertLess(between, 2 * 7 / 8)
        self.assertGreater(between, 1.0)

    def test_mixed_placement_reduces_to_the_colocated_and_separate_formulas(self):
        size = 1e8
        for n in (2, 4, 8):
            self.assertAlmostEqual(
                cost_model.mixed_ps_time(n, n, 0, size, self.link, last_key=1e6),
                cost_model.colocated_ps_time(n, size, self.link, last_key=1e6))
            self.assertAlmostEqual(
                cost_model.mixed_ps_time(n, 0, n, size, self.link, last_key=1e6),
                cost_model.ps_time(n, size, self.link, 1.0 / n, last_key=1e6))
        # N = 4, 2 workers serve, 2 separate servers, f = 1/4: a serving
        # worker carries S + 2·S/4 = 1.5·S (one latency hidden), a separate
        # server 4·S/4 = S (both paid).
        self.assertAlmostEqual(cost_model.mixed_ps_time(4, 2, 2, size, self.link, last_key=0),
                               1.5 + 10e-6)
        # Where the serving worker's link carries little more than S, the
        # separate server's two latencies can bind: N = 2, both serve, one
        # separate server, f = 1/3: 1 + 0 (N − 2 = 0) against 2/3 or S.
        self.assertAlmostEqual(cost_model.mixed_ps_time(2, 2, 1, size, self.link, last_key=0),
                               1.0 + 2 * 10e-6)
        with self.assertRaises(ValueError):
            cost_model.mixed_ps_time(4, 5, 0, size, self.link)

    def test_equal_shares_do_not_beat_bytePS_optimal_shares(self):
        size = 1e8
        for n in (2, 4, 8):
            for separate in (1, 2, n):
                equal = cost_model.mixed_ps_time(n, n, separate, size, self.link, last_key=0)
                self.assertGreaterEqual(equal - 10e-6 + 1e-12,
                                        cost_model.byteps_time(n, separate, size, self.link))
        # N = 4, 2 separate: 1 + 2/6 = 1.33 against 24/20 = 1.2.
        self.assertAlmostEqual(cost_model.mixed_ps_time(4, 4, 2, size, self.link, last_key=0),
                               4 / 3 + 10e-6)
        self.assertAlmostEqual(cost_model.byteps_time(4, 2, size, self.link), 1.2)

    def test_balanced_shares_reach_bytePS_optimum_where_every_worker_serves(self):
        size = 1e8
        for n in range(2, 9):
            for separate in range(0, n + 1):
                f_c, f_s = cost_model.placement_shares(n, n, separate, "balanced")
                self.assertAlmostEqual(n * f_c + separate * f_s, 1.0)
                balanced = cost_model.mixed_ps_time(n, n, separate, size, self.link, last_key=0,
                                                    largest_share=f_c, separate_share=f_s)
                # Balanced, a separate server's link carries what a serving
                # worker's does, and pays both latencies where one exists.
                latencies = 2 if separate else 1
                self.assertAlmostEqual(
                    balanced,
                    cost_model.byteps_time(n, separate, size, self.link) + latencies * 10e-6)
        self.assertEqual(cost_model.placement_shares(4, 4, 2, "balanced"),
                         cost_model.placement_shares(4, 4, 2, "balanced"))
        f_c, f_s = cost_model.placement_shares(4, 4, 2, "balanced")
        self.assertAlmostEqual(f_c, 0.1)
        self.assertAlmostEqual(f_s, 0.3)

    def test_balanced_shares_help_where_only_some_workers_serve(self):
        size = 1e8
        # N = 4, 2 serve, 2 separate: f_c = 1/6, f_s = 1/3, 1.33·S/B on every
        # busy link against equal shares' 1.5·S/B.
        f_c, f_s = cost_model.placement_shares(4, 2, 2, "balanced")
        self.assertAlmostEqual(f_c, 1 / 6)
        self.assertAlmostEqual(f_s, 1 / 3)
        self.assertAlmostEqual(
            cost_model.mixed_ps_time(4, 2, 2, size, self.link, last_key=0,
                                     largest_share=f_c, separate_share=f_s),
            4 / 3 + 2 * 10e-6)
        # As many separate servers as workers: they take everything, S/B.
        self.assertEqual(cost_model.placement_shares(4, 2, 4, "balanced"), (0.0, 0.25))
        # One kind of server only, or equal: 1/K.
        for c, s in ((0, 3), (4, 0)):
            self.assertEqual(cost_model.placement_shares(4, c, s, "balanced"),
                             (1 / (c + s), 1 / (c + s)))
        with self.assertRaises(ValueError):
            cost_model.placement_shares(4, 2, 2, "weighted")

    def test_whole_keys_only_approach_the_balanced_targets(self):
        # 2.5 MB in 64 KiB keys: close to 0.1 / 0.3; in 1 MiB keys, far.
        fine = cost_model.placed_shares(2.5e6, 4, 4, 2, "balanced", chunk=64 * 1024)
        self.assertAlmostEqual(fine[0], 0.1, delta=64 * 1024 * 3 / 2.5e6)
        self.assertAlmostEqual(fine[1], 0.3, delta=64 * 1024 * 3 / 2.5e6)
        coarse = cost_model.placed_shares(2.5e6, 4, 4, 2, "balanced", chunk=1 << 20)
        self.assertGreater(max(coarse), 0.4)
        self.assertEqual(cost_model.placed_shares(1e6, 4, 2, 2, "equal", chunk=250_000),
                         (0.25, 0.25))

    def test_predict_uses_the_partition_that_ran(self):
        point = {"strategy": "ps-mixed", "workers": 4, "servers": 6, "colocated": 4,
                 "sweep": "--ps_partition=balanced --ps_chunk_kb=64"}
        size = 2.5e6
        f_c, f_s = cost_model.placed_shares(size, 4, 4, 2, "balanced", chunk=64 * 1024)
        prediction = cost_model.predict(point, self.link, [size], 0, 10, last_tensor_bytes=1e6)
        expected = cost_model.mixed_ps_time(4, 4, 2, size, self.link, last_key=64 * 1024,
                                            largest_share=f_c, separate_share=f_s)
        self.assertAlmostEqual(prediction["predicted_comm_ms"], 1000 * expected)
        # The job's own shares, where its summary gave them, win.
        measured = dict(point, partition="balanced", colocated_server_share=0.1,
                        separate_server_share=0.3)
        prediction = cost_model.predict(measured, self.link, [size], 0, 10,
                                        last_tensor_bytes=1e6)
        self.assertAlmostEqual(
            prediction["predicted_comm_ms"],
            1000 * (1.2 * size / 1e8 + 3 * 64 * 1024 / 1e8 + 2 * 10e-6))
        # BytePS's optimum, plus the tail of (3) it leaves out.
        self.assertAlmostEqual(
            prediction["predicted_comm_ms"] - prediction["byteps_optimum_comm_ms"],
            1000 * 3 * 64 * 1024 / 1e8)

    def test_predict_covers_the_mixed_placement(self):
        point = {"strategy": "ps-mixed", "workers": 4, "servers": 6, "colocated": 4}
        prediction = cost_model.predict(point, self.link, [1e8], 0, 10, last_tensor_bytes=1e6)
        expected = cost_model.mixed_ps_time(4, 4, 2, 1e8, self.link, last_key=1e6)
        self.assertAlmostEqual(prediction["predicted_comm_ms"], 1000 * expected)
        self.assertAlmostEqual(prediction["predicted_step_ms"], 10 + 1000 * expected)
        self.assertAlmostEqual(prediction["byteps_optimum_comm_ms"], 1000 * (1.2 + 2 * 10e-6))
        point = dict(point, servers=3, colocated=2)
        prediction = cost_model.predict(point, self.link, [1e8], 0, 10, last_tensor_bytes=1e6)
        self.assertNotIn("byteps_optimum_comm_ms", prediction)
        self.assertAlmostEqual(
            prediction["predicted_comm_ms"],
            1000 * cost_model.mixed_ps_time(4, 2, 1, 1e8, self.link, last_key=1e6))

    def test_predict_reads_the_chunk_from_every_jobs_flags_and_the_sweep(self):
        point = {"strategy": "ps", "workers": 8, "servers": 8}
        default = cost_model.predict(point, self.link, [1e8], 0, 10, last_tensor_bytes=1e6)
        extra = cost_model.predict(point, self.link, [1e8], 0, 10, last_tensor_bytes=1e6,
                                   extra_flags="--ps_stream_window_kb=32 --ps_chunk_kb=64")
        # The last key shrinks from the 1 MB tensor to 64 KiB: N·b/B less tail.
        self.assertAlmostEqual(default["predicted_comm_ms"] - extra["predicted_comm_ms"],
                               1000 * 8 * (1e6 - 64 * 1024) / self.link.bandwidth, places=6)
        swept = cost_model.predict(dict(point, sweep="--ps_chunk_kb=128"), self.link, [1e8], 0,
                                   10, last_tensor_bytes=1e6, extra_flags="--ps_chunk_kb=64")
        self.assertAlmostEqual(default["predicted_comm_ms"] - swept["predicted_comm_ms"],
                               1000 * 8 * (1e6 - 128 * 1024) / self.link.bandwidth, places=6)

    def test_exposed_communication_overlaps_buckets_with_compute(self):
        # Two equal buckets, 1 s of compute, 0.3 s per bucket: the first
        # travels during the second half of compute, the second after it.
        end, exposed = cost_model.exposed_communication([1, 1], 1.0, lambda size: 0.3)
        self.assertAlmostEqual(end, 1.3)
        self.assertAlmostEqual(exposed, 0.3)
        # Communication slower than compute queues up behind the link.
        end, exposed = cost_model.exposed_communication([1, 1], 1.0, lambda size: 0.8)
        self.assertAlmostEqual(end, 0.5 + 0.8 + 0.8)
        self.assertAlmostEqual(exposed, 1.1)


class SplitLinksTest(unittest.TestCase):
    def test_latency_and_options_stay_with_their_rate(self):
        self.assertEqual(scaling.split_links("100mbit,1ms,1gbit,loopback"),
                         ["100mbit,1ms", "1gbit", "loopback"])
        self.assertEqual(scaling.split_links("1gbit,200us,buffer=1mb,ecn"),
                         ["1gbit,200us,buffer=1mb,ecn"])
        self.assertEqual(scaling.split_links("1gbit"), ["1gbit"])


if __name__ == "__main__":
    unittest.main()
