"""One worker of the second-interpreter test: gradsync's strategy on plain
float32 buffers through the ctypes library, with no torch.

    plain_buffers_worker.py SYNC STEPS

Identity from torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), or none for one worker. Each step hands over one bucket of two
parameters (3 and 5 floats) holding rank + 1 + step + i/8 in value i, as
DDP's last bucket; at the step's end every value must be the mean over the
workers, (world + 1) / 2 + step + i/8. Prints one line per check and
exits non-zero on the first wrong value, naming the step and the index.
"""

import array
import os
import sys


def main():
    sync, steps = sys.argv[1], int(sys.argv[2])
    import gradsync
    from gradsync import extension
    if "torch" in sys.modules:
        print("FAIL: importing gradsync imported torch")
        return 1
    print("python %d.%d, library %s" % (sys.version_info[:2] +
                                        (extension.library_path,)),
          flush=True)
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    worker = extension.TorchWorker(sync, 30.0, [], model="plain_buffers")
    if (worker.rank, worker.world_size, worker.sync) != (rank, world, sync):
        print("FAIL: joined as worker %d/%d with %s, expected %d/%d with %s" %
              (worker.rank, worker.world_size, worker.sync, rank, world, sync))
        return 1
    keys = [(1001, 3), (1002, 5)]
    worker.set_ready_order([key for key, _ in keys])
    numel = sum(n for _, n in keys)
    for step in range(steps):
        values = array.array("f", [rank + 1 + step + i / 8.0
                                   for i in range(numel)])
        address, length = values.buffer_info()
        ended = worker.add_bucket(0, address, length, keys, True)
        if not ended:
            print("FAIL: step %d did not end at its last bucket" % step)
            return 1
        for i, value in enumerate(values):
            expected = (world + 1) / 2.0 + step + i / 8.0
            if abs(value - expected) > 1e-5:
                print("FAIL: worker %d step %d value %d is %r, expected %r" %
                      (rank, step, i, value, expected))
                return 1
        print("worker %d step %d: averaged (%s)" %
              (rank, step, worker.last_step()["step"]), flush=True)
    worker.close()
    print("worker %d: %d steps of %s over %d workers OK" %
          (rank, steps, sync, world), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
