"""A PyTorch job's run folder holds what a native job's does.

Two workers and two parameter servers under `gradsync launch --trace`, five
steps of python/tests/ddp_worker.py behind gradsync's hook: every worker's
step lines (step time, exposed communication, bytes, the loss it recorded),
worker 0's layout.json and summary.json (every worker's figures, the
strategy's summary, the manifest with the settings the strategy derived) and
the job's merged timeline with both workers' and both servers' tracks,
worker 0's progress line, the device compute time the hook's clock hands
over (gradsync/device_timing.py; here by hand) in every step line, and a
strategy flag given to the launcher applied by the workers and the servers
alike.
"""

import json
import os
import unittest

import launch_jobs

STEPS = 5
# Handed to every step as a device's compute time (what the hook's CUDA
# events give on a GPU): the step lines carry it as compute_ms.
DEVICE_COMPUTE_MS = 7.25


class RunFolderTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.run_dir = launch_jobs.scratch("run-folder")
        cls.trace = os.path.join(cls.run_dir, "trace.json")
        cls.code, cls.output, _ = launch_jobs.launch(
            "run-folder", 2,
            ["--mode=gradsync", "--sync=ps", "--steps=%d" % STEPS,
             "--device_compute_ms=%g" % DEVICE_COMPUTE_MS],
            servers=2, launch_flags=["--trace=%s" % cls.trace,
                                     "--ps_stream_window_kb=128"])

    def setUp(self):
        self.assertEqual(self.code, 0, self.output)

    def read_json(self, name):
        with open(os.path.join(self.run_dir, name)) as f:
            return json.load(f)

    def test_every_worker_writes_a_line_per_step(self):
        for rank in (0, 1):
            with open(os.path.join(self.run_dir, "worker%d.jsonl" % rank)) as f:
                lines = [json.loads(line) for line in f]
            steps = [l for l in lines if l["type"] == "step"]
            self.assertEqual([l["step"] for l in steps], list(range(STEPS)))
            for line in steps:
                self.assertEqual(line["rank"], rank)
                self.assertGreater(line["bytes_sent"], 0, line)
                self.assertGreater(line["bytes_recv"], 0, line)
                self.assertGreaterEqual(line["sync_wait_ms"], 0, line)
                self.assertGreater(line["loss"], 0, line)  # record_loss()
                self.assertEqual(line["compute_ms"], DEVICE_COMPUTE_MS, line)
            for line in steps[1:]:  # step 0 starts at DDP's first bucket
                self.assertGreater(line["step_ms"], 0, line)
                self.assertLessEqual(line["sync_wait_ms"], line["step_ms"], line)
                self.assertGreater(line["samples_per_s"], 0, line)

    def test_summary_has_the_figures_and_the_manifest(self):
        summary = self.read_json("summary.json")
        self.assertEqual(summary["type"], "summary")
        self.assertEqual(summary["strategy"], "ps")
        self.assertEqual((summary["workers"], summary["servers"]), (2, 2))
        self.assertEqual(summary["model"], "pytorch:ddp_worker.py")
        self.assertGreater(summary["step_ms"], 0)
        self.assertIn("sync_wait_ms", summary)
        self.assertLessEqual(summary["sync_wait_ms"], summary["step_ms"])
        self.assertGreater(summary["bytes_per_worker_per_step"], 0)
        self.assertEqual([r["rank"] for r in summary["ranks"]], [0, 1])
        for rank in summary["ranks"]:
            self.assertEqual(rank["steps"], STEPS)
            self.assertEqual(rank["measured_steps"], STEPS - 1)  # not step 0
            self.assertGreater(rank["bytes_sent_per_step"], 0)
            # The parameter server's own summary, as in a native job.
            self.assertEqual(len(rank["sync"]["server_summaries"]), 2)
        manifest = summary["manifest"]
        self.assertIn("git_commit", manifest)
        self.assertEqual(manifest["settings"]["ps_chunk_kb"]["source"][:5], "auto:")

    def test_strategy_flags_given_to_the_launcher_reach_workers_and_servers(self):
        manifest = self.read_json("summary.json")["manifest"]
        self.assertEqual(manifest["flags"]["ps_stream_window_kb"], "128")
        self.assertEqual(manifest["settings"]["ps_stream_window_kb.push"]["source"],
                         "flag")
        for k in (0, 1):
            with open(os.path.join(self.run_dir, "logs", "server%d.log" % k)) as f:
                self.assertIn("push stream window 128 KiB (flag)", f.read())

    def test_worker_0_prints_the_progress_line(self):
        self.assertRegex(self.output,
                         r"\[worker 0\] step %d/%d  epoch 1/1  loss [0-9.]+  "
                         r"[0-9]+ samples/s" % (STEPS, STEPS))

    def test_layout_is_the_strategys_buckets(self):
        layout = self.read_json("layout.json")
        # ddp_worker.py's MLP: 32*64+64 + 64*64+64 + 64*10+10 floats.
        self.assertEqual(layout["total_numel"], 2112 + 4160 + 650)
        self.assertGreater(len(layout["buckets"]), 1)

    def test_trace_merges_workers_and_servers(self):
        with open(self.trace) as f:
            events = json.load(f)["traceEvents"]
        processes = {e["args"]["name"] for e in events
                     if e.get("name") == "process_name"}
        self.assertTrue({"worker 0", "worker 1"} <= processes, processes)
        self.assertEqual(len([p for p in processes if "server" in p]), 2,
                         processes)
        names = {e.get("name") for e in events}
        self.assertIn("Finish (exposed communication)", names)
        self.assertIn("DDP bucket 0", names)
        self.assertIn("step 1", names)
        self.assertNotIn("step 0", names)  # the set-up step is not traced


if __name__ == "__main__":
    unittest.main()
