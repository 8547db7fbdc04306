"""The hook's GPU step clock (gradsync/device_timing.py) with stand-in
events: Debian's torch has no CUDA, so this checks which events are recorded
where, that nothing is waited for, and when the host's rule is kept."""

import unittest

import torch

from gradsync import device_timing

CUDA = torch.device("cuda", 0)
CPU = torch.device("cpu")


class FakeEvent:
    """Records the stream it was recorded on; `reached` and `at_ms` say what
    the device has done."""

    def __init__(self, log):
        self.log = log
        self.stream = None
        self.reached = True
        self.at_ms = None

    def record(self, stream):
        self.stream = stream
        self.log.append(self)

    def query(self):
        return self.reached

    def elapsed_time(self, other):
        return other.at_ms - self.at_ms

    def synchronize(self):
        raise AssertionError("the clock must never wait for the device")


class StepClockTest(unittest.TestCase):

    def setUp(self):
        self.events = []
        self.clock = device_timing.StepClock(
            event=lambda: FakeEvent(self.events),
            current_stream=lambda device: "current stream of %s" % device)

    def test_forward_start_to_backward_end_on_the_current_stream(self):
        self.clock.forward_started(CUDA)
        self.clock.backward_ended(CUDA)
        start, end = self.events
        self.assertEqual(start.stream, "current stream of cuda:0")
        self.assertEqual(end.stream, "current stream of cuda:0")
        start.at_ms, end.at_ms = 10.0, 37.5
        self.assertEqual(self.clock.compute_ms(), 27.5)

    def test_only_the_first_forward_of_a_step_counts(self):
        # Gradient accumulation: several forwards before the hook's step.
        self.clock.forward_started(CUDA)
        self.clock.forward_started(CUDA)
        self.clock.backward_ended(CUDA)
        self.assertEqual(len(self.events), 2)
        self.events[0].at_ms, self.events[1].at_ms = 0.0, 5.0
        self.assertEqual(self.clock.compute_ms(), 5.0)
        # The next step records its own start.
        self.clock.forward_started(CUDA)
        self.assertEqual(len(self.events), 3)

    def test_a_start_not_reached_keeps_the_host_rule_without_waiting(self):
        self.clock.forward_started(CUDA)
        self.clock.backward_ended(CUDA)
        self.events[0].reached = False
        self.assertIsNone(self.clock.compute_ms())
        # And the step after it starts afresh.
        self.clock.forward_started(CUDA)
        self.clock.backward_ended(CUDA)
        self.events[2].at_ms, self.events[3].at_ms = 1.0, 4.0
        self.assertEqual(self.clock.compute_ms(), 3.0)

    def test_nothing_on_the_cpu(self):
        self.clock.forward_started(CPU)
        self.clock.backward_ended(CPU)
        self.assertEqual(self.events, [])
        self.assertIsNone(self.clock.compute_ms())

    def test_no_forward_seen_means_no_device_time(self):
        # A DDP model hooked with register_comm_hook directly: no pre-hook.
        self.clock.backward_ended(CUDA)
        self.assertEqual(self.events, [])
        self.assertIsNone(self.clock.compute_ms())


class ForwardPreHookTest(unittest.TestCase):
    """register()'s pre-hook: only forwards that backward follows."""

    def test_forward_under_no_grad_is_not_the_steps_start(self):
        from gradsync import torch as gradsync_torch
        started = []

        class Clock:
            def forward_started(self, device):
                started.append(device)

        class State:
            _clock = Clock()

        model = torch.nn.Linear(2, 2)
        hook = gradsync_torch._forward_pre_hook(State(), model)
        with torch.no_grad():
            hook(model, (torch.ones(1, 2),))
        self.assertEqual(started, [])
        hook(model, (torch.ones(1, 2),))
        self.assertEqual(started, [torch.device("cpu")])


if __name__ == "__main__":
    unittest.main()
