#!/usr/bin/python3
"""gradsync compare's parsing, its command for bench/scaling.py, what bounded
each point and the one-line answer, on made-up points (no jobs run)."""
import io
import json
import os
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402
import cost_model  # noqa: E402
import scaling  # noqa: E402


def point(strategy, n, k, step, busiest_mb, predicted=None, **extra):
    p = {"strategy": strategy, "workers": n, "servers": k, "step_ms": step,
         "step_ms_min": step - 1, "step_ms_max": step + 1, "exposed_ms": step,
         "busiest_link_bytes": busiest_mb * 1e6, "predicted_step_ms": predicted,
         "predicted_comm_ms": predicted, "retrans_segments": 10, "rto_timeouts": 0,
         "retrans_percent": 0.1, "cpu_bound": False, "machine_busy_unniced_max": 0.3}
    p.update(extra)
    return p


class ParsingTest(unittest.TestCase):
    def test_netem_specs(self):
        self.assertEqual(compare.parse_netem(""), "loopback")
        for spec in ("100mbit", "1gbit,200us", "2.5gbit,1ms,buffer=1mb", "1gbit,ecn"):
            self.assertEqual(compare.parse_netem(spec), spec)
        for spec, words in (("fast", "the rate 'fast'"), ("100mb", "the rate '100mb'"),
                            ("1gbit,soon", "'soon' is neither")):
            with self.assertRaises(compare.UsageError) as raised:
                compare.parse_netem(spec)
            self.assertIn(words, str(raised.exception))

    def test_strategies(self):
        self.assertEqual(compare.parse_strategies("all"), list(compare.STRATEGIES))
        # hybrid needs a row-sparse tensor: 'all' leaves it out for other models.
        self.assertNotIn("hybrid-kn", compare.parse_strategies("all", "custom:25:32"))
        self.assertIn("hybrid-kn", compare.parse_strategies("all", "embedding:100000:32"))
        # STRATEGIES' order, whatever the order given.
        self.assertEqual(compare.parse_strategies("ps-kn,ring"), ["ring", "ps-kn"])
        with self.assertRaises(compare.UsageError) as raised:
            compare.parse_strategies("ring,butterfly")
        self.assertIn("unknown strategy 'butterfly'", str(raised.exception))
        self.assertIn("ps-colocated", str(raised.exception))

    def test_workers(self):
        self.assertEqual(compare.parse_workers("2,4,8"), [2, 4, 8])
        for bad in ("1", "four", ""):
            with self.assertRaises(compare.UsageError):
                compare.parse_workers(bad)

    def test_netem_needs_root(self):
        with mock.patch.object(os, "geteuid", return_value=1000):
            with self.assertRaises(compare.UsageError) as raised:
                compare.check_root("100mbit")
            self.assertIn("needs root", str(raised.exception))
            compare.check_root("loopback")  # no root needed

    def test_bad_input_exits_with_one_message(self):
        stderr = io.StringIO()
        with mock.patch.object(sys, "stderr", stderr):
            self.assertEqual(compare.main(["--netem=fast"]), 2)
        self.assertEqual(len(stderr.getvalue().strip().splitlines()), 1)
        self.assertIn("gradsync compare: --netem=fast", stderr.getvalue())

    def test_impossible_input_is_refused_before_anything_runs(self):
        # Each exits 2 with one line, before the link probe or any job.
        cases = (
            (["--strategies=hybrid-kn"], "hybrid-kn needs a model with an embedding table"),
            (["--workers=2", "--strategies=tree", "--compressions=fp16"],
             "tree with --compression=fp16 is not built"),
            (["--repeats=0"], "--repeats: give a whole number of at least 1, not '0'"),
            (["--steps=-1"], "--steps: give a whole number of at least 1, not '-1'"),
            (["--warmup=x"], "--warmup: give a whole number of at least 0, not 'x'"),
            (["--compressions=topk:abc"], "the ratio 'abc' is not a number"),
            (["--model=embedding:abc:3"], "--model=embedding:abc:3: embedding takes whole"),
            (["--no_such_flag"], "unrecognized arguments: --no_such_flag"),
        )
        for argv, words in cases:
            stderr = io.StringIO()
            with mock.patch.object(sys, "stderr", stderr), \
                    mock.patch.object(compare.subprocess, "run") as run:
                self.assertEqual(compare.main(argv), 2, argv)
            run.assert_not_called()
            self.assertEqual(len(stderr.getvalue().strip().splitlines()), 1, argv)
            self.assertIn(words, stderr.getvalue(), argv)

    def test_points_that_cannot_run_are_named_and_left_out(self):
        args = compare.parse_args(["--workers=2", "--strategies=tree,ring",
                                   "--compressions=none,fp16"])
        self.assertEqual(args.strategy_names, ["ring", "tree"])
        self.assertEqual([point for point, _ in args.skipped],
                         ["tree with --compression=fp16"])

    def test_no_distributed_point_is_a_failure(self):
        # Every distributed job failed: only the reference is in the sweep.
        sweep = {"links": {}, "manifest": {}, "points": [point(
            "local", 1, 0, 50, 0, model="mlp", link="loopback", bucket_mb=0, compute_ms=0)]}
        stderr = io.StringIO()
        with mock.patch.object(sys, "stderr", stderr), \
                mock.patch.object(compare.subprocess, "run") as run, \
                mock.patch.object(compare.os, "access", return_value=True), \
                mock.patch("builtins.open", mock.mock_open(read_data=json.dumps(sweep))), \
                mock.patch.object(compare.os, "makedirs"):
            run.return_value.returncode = 0
            self.assertEqual(compare.main(["--workers=2", "--out=somewhere"]), 1)
        self.assertEqual(run.call_count, 1)  # the sweep, and no plot
        self.assertIn("no distributed point ran", stderr.getvalue())

    def test_scaling_command_runs_each_strategy_once(self):
        args = compare.parse_args(["--netem=100mbit", "--workers=4", "--", "--lr=0.1"])
        command = compare.scaling_command(args, args.strategy_names, args.worker_counts, "out")
        self.assertIn(
            "--strategies=ring,halving_doubling,tree,allreduce,ps,ps-colocated", command)
        self.assertIn("--servers=1,N", command)
        self.assertIn("--links=100mbit", command)
        self.assertIn("--models=mlp", command)
        self.assertEqual(command[-2:], ["--", "--lr=0.1"])
        only = compare.scaling_command(args, ["ps-kn"], [8], "out")
        self.assertIn("--strategies=ps", only)
        self.assertIn("--servers=N", only)


class TrainingCommandTest(unittest.TestCase):
    """`gradsync compare ... -- /usr/bin/python3 train.py ARGS`."""
    COMMAND = ["/usr/bin/python3", "examples/pytorch/resnet18_cifar10.py", "--random_data",
               "--steps=12"]

    def parse(self, *flags, command=None):
        return compare.parse_args(["--netem=100mbit", "--workers=4", *flags, "--",
                                   *(command or self.COMMAND)])

    def test_the_command_goes_to_the_sweep_whole(self):
        args = self.parse("--strategies=ring,ps-kn")
        self.assertEqual(args.command, self.COMMAND)
        self.assertEqual(args.model_label, "pytorch-resnet18_cifar10")
        command = compare.scaling_command(args, args.strategy_names, args.worker_counts, "out")
        self.assertEqual(command[command.index("--") + 1:], self.COMMAND)
        self.assertIn("--strategies=ring,ps", command)
        self.assertIn("--servers=N", command)

    def test_all_means_the_strategies_a_command_can_run(self):
        args = self.parse()
        # Every strategy but hybrid (not behind gradsync.torch's hook).
        self.assertEqual(args.strategy_names,
                         [s for s in compare.STRATEGIES if s != "hybrid-kn"])

    def test_a_strategy_no_command_can_run_is_refused(self):
        with mock.patch.dict(compare.STRATEGIES,
                             {"ps-mixed": compare.Strategy("ps-mixed", None, "mixed")}):
            with self.assertRaises(compare.UsageError) as raised:
                self.parse("--strategies=ring,ps-mixed")
        self.assertIn("ps-mixed cannot run a training command", str(raised.exception))

    def test_what_a_command_cannot_do_is_refused(self):
        for flags, command, words in (
                ([], self.COMMAND + ["--sync=ps"], "chooses --sync itself"),
                (["--model=resnet18"], None, "drop --model"),
                ([], ["/nonexistent/python3", "train.py"], "is not an executable")):
            with self.assertRaises(compare.UsageError, msg=words) as raised:
                self.parse(*flags, command=command)
            self.assertIn(words, str(raised.exception))

    def test_training_flags_are_not_a_command(self):
        args = compare.parse_args(["--workers=4", "--", "--lr=0.1"])
        self.assertIsNone(args.command)
        self.assertEqual(args.model_label, "mlp")


class VerdictTest(unittest.TestCase):
    def test_points_map_back_to_strategies(self):
        self.assertEqual(compare.strategy_name(point("ps", 4, 1, 1, 1)), "ps-k1")
        self.assertEqual(compare.strategy_name(point("ps", 4, 4, 1, 1)), "ps-kn")
        self.assertEqual(compare.strategy_name(point("ring", 4, 0, 1, 1)), "ring")
        self.assertIsNone(compare.strategy_name(point("ps", 4, 2, 1, 1)))
        self.assertEqual(compare.label(point("ps", 8, 8, 1, 1)), "PS K=8")

    def test_what_bounded_each_point(self):
        self.assertTrue(compare.bounded_by(point("ring", 4, 0, 330, 3.8, 314), "100mbit")
                        .startswith("link (within 25%"))
        self.assertIn("59% slower than the α–β model",
                      compare.bounded_by(point("ring", 4, 0, 500, 3.8, 314), "100mbit"))
        self.assertTrue(compare.bounded_by(
            point("ps", 4, 4, 300, 2.5, 250, cpu_bound=True, machine_busy_unniced_max=0.9),
            "100mbit").startswith("CPU (machine 90% busy"))
        self.assertTrue(compare.bounded_by(point("ps", 4, 4, 300, 2.5, 250, rto_timeouts=3),
                                           "100mbit").startswith("retransmissions"))
        self.assertTrue(compare.bounded_by(point("ring", 4, 0, 30, 0.1, 20), "1gbit,10ms",
                                           latency_part_ms=12).startswith("latency"))
        self.assertTrue(compare.bounded_by(point("ring", 4, 0, 30, 0.1, 20), "loopback")
                        .startswith("CPU"))
        self.assertTrue(compare.bounded_by(point("local", 1, 0, 5, 0), "100mbit")
                        .startswith("compute"))

    def test_latency_part_counts_the_rings_hops(self):
        link = cost_model.Link(1e-3, 12.5e6)
        ring = compare.latency_ms(point("ring", 8, 0, 1, 1), link, num_buckets=2)
        ps = compare.latency_ms(point("ps", 8, 8, 1, 1), link, num_buckets=2)
        self.assertAlmostEqual(ring, 2 * 2 * 7 * 1.0, places=3)
        self.assertAlmostEqual(ps, 2 * 2 * 1.0, places=3)

    def rows(self, *points, link="100mbit"):
        return compare.verdict_rows(list(points), link, None, 1)

    def test_answer_names_the_winner_against_the_ring_and_why(self):
        rows = self.rows(point("local", 1, 0, 5, 0), point("ring", 8, 0, 366, 4.4, 364),
                         point("ps", 8, 1, 1700, 20.0, 1650), point("ps", 8, 8, 264, 2.5, 253))
        line = compare.answer(rows, "100mbit")
        self.assertTrue(line.startswith("PS K=8 is 1.39x faster than the ring at N=8"), line)
        self.assertIn("busiest link carries 2.50 MB a step against 4.40 MB", line)

    def test_when_the_ring_wins_it_is_compared_with_the_runner_up(self):
        rows = self.rows(point("ring", 4, 0, 300, 3.8, 314), point("ps", 4, 1, 900, 10, 880),
                         point("ps-colocated", 4, 4, 330, 3.8, 333))
        line = compare.answer(rows, "100mbit")
        self.assertTrue(line.startswith("ring all-reduce is 1.10x faster than PS colocated"),
                        line)
        self.assertIn("same bytes", line)

    def test_a_cpu_bound_answer_says_so(self):
        rows = self.rows(point("ring", 4, 0, 300, 3.8, 100),
                         point("ps", 4, 4, 200, 2.5, 100, cpu_bound=True),
                         link="loopback")
        self.assertIn("the CPU bounded the run", compare.answer(rows, "loopback"))

    def test_a_tie_is_called_a_tie(self):
        rows = self.rows(point("ring", 4, 0, 300, 3.8, 300), point("ps", 4, 4, 295, 2.5, 290))
        self.assertIn("a tie", compare.answer(rows, "100mbit"))

    def test_table_has_a_row_per_point(self):
        rows = self.rows(point("local", 1, 0, 5, 0), point("ring", 4, 0, 300, 3.8, 314))
        table = compare.format_table(rows).splitlines()
        self.assertEqual(len(table), 4)
        self.assertIn("bounded by", table[0])
        self.assertIn("local (reference)", table[2])


class SchedulesTest(unittest.TestCase):
    """--schedules: parsing, the sweep it asks for, and a verdict from a
    finished sweep (its files written here, no job run)."""

    def test_parsing(self):
        self.assertEqual(compare.parse_schedules(""), [])
        self.assertEqual(compare.parse_schedules("priority,fifo"), ["priority", "fifo"])
        for spec, extra, words in (
                ("lifo", [], "unknown schedule 'lifo'; choose from fifo, priority"),
                ("fifo,fifo", [], "names a schedule twice"),
                (",", [], "give some of fifo, priority"),
                ("fifo,priority", ["--schedule=fifo"], "drop one")):
            with self.assertRaises(compare.UsageError) as raised:
                compare.parse_schedules(spec, extra)
            self.assertIn(words, str(raised.exception))
        # Without --schedules a --schedule after -- is the user's own.
        self.assertEqual(compare.parse_schedules("", ["--schedule=priority"]), [])

    def test_an_unknown_schedule_is_refused_before_anything_runs(self):
        stderr = io.StringIO()
        with mock.patch.object(sys, "stderr", stderr), \
                mock.patch.object(compare.subprocess, "run") as run:
            self.assertEqual(compare.main(["--workers=2", "--schedules=fifo,lifo"]), 2)
        run.assert_not_called()
        self.assertEqual(stderr.getvalue().strip().splitlines(),
                         ["gradsync compare: --schedules: unknown schedule 'lifo'; "
                          "choose from fifo, priority"])

    def test_each_schedule_is_a_sweep_set_and_the_default_passes_none(self):
        args = compare.parse_args(["--workers=4", "--schedules=fifo,priority", "--",
                                   "--lr=0.1"])
        command = compare.scaling_command(args, args.strategy_names, args.worker_counts, "out")
        self.assertIn("--sweep=--schedule=fifo;--schedule=priority", command)
        self.assertEqual(command[-2:], ["--", "--lr=0.1"])
        default = compare.parse_args(["--workers=4"])
        self.assertFalse([a for a in compare.scaling_command(
            default, default.strategy_names, default.worker_counts, "out") if "schedule" in a])

    # A finished sweep: the reference, the ring and PS K=4 under both
    # schedules; the ring's priority job recorded its partition, the PS's
    # recorded --schedule as ignored (it ran fifo).
    LINK = {"alpha_us": 100.0, "bandwidth_bytes_per_s": 1.25e7}  # 100 Mbit/s
    GROUP = {"model": "mlp", "link": "100mbit", "bucket_mb": 0.0, "compute_ms": 0.0,
             "compression": "none"}
    # Three buckets of 0.8 MB in hand-off order: with 290 ms of compute the
    # ring's 240 ms of link time and the forward are comparable.
    LAYOUT = {"buckets": [{"bytes": 800_000, "params": [2]}, {"bytes": 800_000, "params": [1]},
                          {"bytes": 800_000, "params": [0]}],
              "params": [{"numel": 200_000}] * 3}

    def sweep_points(self):
        def at(strategy, k, schedule, step, exposed):
            return point(strategy, 4, k, step, 2.0, **self.GROUP, sweep=f"--schedule={schedule}",
                         exposed_ms=exposed, measured_compute_ms=290)
        return [point("local", 1, 0, 300, 0, **self.GROUP, sweep="", exposed_ms=0,
                      measured_compute_ms=290),
                at("ring", 0, "fifo", 400, 100), at("ring", 0, "priority", 330, 30),
                at("ps", 4, "fifo", 380, 90), at("ps", 4, "priority", 381, 91)]

    def write_sweep(self, out):
        points = self.sweep_points()
        for p in points:
            run_dir = os.path.join(out, "points", scaling.label(p), "r0")
            os.makedirs(run_dir)
            flags = cost_model.training_flags(p["sweep"])
            manifest = {"flags": flags, "settings": {}, "ignored_flags": {}}
            if p["strategy"] == "ps" and flags.get("schedule") == "priority":
                manifest["ignored_flags"]["schedule"] = "the PS client sends in ready order"
            ranks = []
            if p["strategy"] == "ring" and flags.get("schedule") == "priority":
                # The ring's own record, with the partition and credit it
                # derived (one partition in flight): the prediction uses them.
                ranks = [{"sync": {"schedule": "priority", "partition_bytes": 256 << 10,
                                   "credit_bytes": 256 << 10}}]
            with open(os.path.join(run_dir, "summary.json"), "w") as f:
                json.dump({"manifest": manifest, "ranks": ranks}, f)
            with open(os.path.join(run_dir, "layout.json"), "w") as f:
                json.dump(self.LAYOUT, f)
        with open(os.path.join(out, "sweep.json"), "w") as f:
            json.dump({"links": {"100mbit": self.LINK}, "manifest": {"git_commit": "abc"},
                       "points": points}, f)
        with open(os.path.join(out, "points.csv"), "w") as f:
            f.write("strategy,sweep,workers\n" + "".join(
                f"{p['strategy']},{p['sweep']},{p['workers']}\n" for p in points))

    def test_the_verdict_puts_the_schedules_side_by_side(self):
        with tempfile.TemporaryDirectory() as out:
            self.write_sweep(out)
            stdout = io.StringIO()
            with mock.patch.object(sys, "stdout", stdout), \
                    mock.patch.object(compare.subprocess, "run") as run, \
                    mock.patch.object(compare.os, "geteuid", return_value=0), \
                    mock.patch.object(compare.os, "access", return_value=True):
                run.return_value.returncode = 0
                self.assertEqual(compare.main(
                    ["--netem=100mbit", "--workers=4", "--strategies=ring,ps-kn",
                     "--schedules=fifo,priority", f"--out={out}", "--bin_dir=/nonexistent"]), 0)
            # The sweep, then one plot per schedule, each of its own points.
            self.assertEqual(run.call_count, 3)
            plotted = [c.args[0] for c in run.call_args_list[1:]]
            self.assertEqual([c[c.index("-o") + 1] for c in plotted],
                             [os.path.join(out, "compare_fifo.png"),
                              os.path.join(out, "compare_priority.png")])
            with open(os.path.join(out, "plot_points_priority.csv")) as f:
                self.assertEqual([line.split(",")[:2] for line in f.read().split()[1:]],
                                 [["local", ""], ["ring", "--schedule=priority"],
                                  ["ps", "--schedule=priority"]])
            with open(os.path.join(out, "verdict.json")) as f:
                verdict = json.load(f)
            with open(os.path.join(out, "verdict.txt")) as f:
                text = f.read()
        self.assertEqual(verdict["schedules"], ["fifo", "priority"])
        by_name = {e["name"]: e for e in verdict["schedule_comparison"]}
        self.assertEqual(set(by_name), {"ring", "ps-kn"})
        ring = by_name["ring"]
        self.assertEqual((ring["fifo"]["step_ms"], ring["priority"]["step_ms"]), (400, 330))
        self.assertEqual((ring["fifo"]["exposed_ms"], ring["priority"]["exposed_ms"]), (100, 30))
        self.assertAlmostEqual(ring["priority_vs_fifo_step_percent"], -17.5)
        # The model, too, has priority hide more of a real model's step here.
        self.assertLess(ring["priority"]["predicted_step_ms"], ring["fifo"]["predicted_step_ms"])
        self.assertLess(ring["priority_vs_fifo_predicted_step_percent"], 0)
        # What ran, not what was asked.
        self.assertEqual(by_name["ps-kn"]["priority"]["ran"], "fifo")
        rows = {(r["name"], r["schedule_asked"]): r for r in verdict["rows"]}
        self.assertEqual(rows[("ring", "priority")]["predicted_schedule"], "priority")
        self.assertAlmostEqual(rows[("ring", "priority")]["predicted_step_ms"],
                               rows[("ring", "priority")]["predicted_priority_step_ms"])
        self.assertEqual(rows[("ps-kn", "priority")]["predicted_schedule"], "fifo")
        self.assertEqual(rows[("ps-kn", "priority")]["strategy"],
                         "PS K=4, priority (ran fifo)")
        line = verdict["answer"]
        self.assertTrue(line.startswith("under fifo, PS K=4 is 1.05x faster than the ring "
                                        "at N=4 on 100mbit (380 vs 400 ms a step)"), line)
        self.assertIn("priority against fifo at N=4 on 100mbit: ring all-reduce -18% "
                      "(400 vs 330 ms a step, exposed 100 vs 30 ms; α–β", line)
        self.assertIn("PS K=4 ran fifo when asked priority (the PS client sends in ready "
                      "order)", line)
        self.assertIn("priority vs fifo", text)
        self.assertIn(line, text)

    def test_what_ran_is_the_strategys_record_before_the_flag(self):
        with tempfile.TemporaryDirectory() as out:
            asked = point("tree", 4, 0, 300, 3.8, **self.GROUP, sweep="--schedule=priority")
            run_dir = os.path.join(out, "points", scaling.label(asked), "r0")
            os.makedirs(run_dir)
            with open(os.path.join(run_dir, "summary.json"), "w") as f:
                json.dump({"manifest": {"flags": {"schedule": "priority"},
                                        "settings": {"credit_kb": {"value": 512}}},
                           "ranks": [{"sync": {"schedule": "fifo"}}]}, f)
            silent = point("ring", 4, 0, 300, 3.8, **self.GROUP, sweep="--schedule=priority")
            compare.read_schedules_ran([asked, silent], out)
        self.assertEqual(asked["schedule"], "fifo")
        self.assertEqual(asked["credit_bytes"], 512 * 1024)
        self.assertNotIn("schedule", silent)  # no record: nothing claimed

    def test_a_missing_run_and_a_tie_are_said(self):
        rows = compare.verdict_rows(
            [point("ring", 4, 0, 300, 3.8, 300, sweep="--schedule=fifo", schedule="fifo"),
             point("ring", 4, 0, 290, 3.8, 300, sweep="--schedule=priority",
                   schedule="priority"),
             point("ps", 4, 4, 280, 2.5, 290, sweep="--schedule=fifo", schedule="fifo")],
            "100mbit", None, 1)
        line, table, summary = compare.verdict_answer(rows, ["fifo", "priority"], "100mbit")
        # 299–301 against 289–291: apart; 300 against 290 within 5%: no change.
        self.assertIn("ring all-reduce -3% (300 vs 290 ms a step, exposed 300 vs 290 ms)",
                      line)
        self.assertIn("all within 5%: priority changed nothing here", line)
        self.assertIn("PS K=4 has no priority run", line)
        # A compressed point keeps its method in its name, once.
        rows = compare.verdict_rows(
            [point("ring", 4, 0, 300, 1, 310, sweep="--schedule=fifo", compression="fp16",
                   predicted_schedule="fifo", predicted_exposed_ms=20),
             point("ring", 4, 0, 250, 1, 310, sweep="--schedule=priority",
                   compression="fp16", predicted_schedule="fifo")], "100mbit", None, 1)
        compressed_line, compressed_table, compressed = compare.verdict_answer(
            rows, ["fifo", "priority"], "100mbit")
        self.assertIn("ring all-reduce, fp16 -17%", compressed_line)
        self.assertNotIn("fp16, fp16", compressed_table)
        # Its prediction is fifo's queue: none for the priority run.
        self.assertEqual(compressed[0]["fifo"]["predicted_step_ms"], 310)
        self.assertIsNone(compressed[0]["priority"]["predicted_step_ms"])
        self.assertIn("no run", table)
        self.assertEqual(len(summary), 2)
        # Ranges that overlap are said to.
        rows[1].update(step_ms=299.5, step_ms_min=295, step_ms_max=304)
        line, _, _ = compare.verdict_answer(rows, ["fifo", "priority"], "100mbit")
        self.assertIn("the repeats' ranges overlap", line)


if __name__ == "__main__":
    unittest.main()
