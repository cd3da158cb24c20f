"""The smallest honest all_reduce timing loop: the baseline the smoke harness is compared with.

No checks, no per-call brackets, no JSON: warm-up, then one bracket around ``iters`` calls.
Prints one line per size: ``bytes seconds_per_call busbw_GBps`` (rank 0).
"""

import os
import sys
import time

import torch
import torch.distributed as dist


def main() -> None:
    sizes = [int(s) for s in sys.argv[1].split(",")]
    iters, warmup = int(sys.argv[2]), int(sys.argv[3])
    dist.init_process_group("gloo")
    n = dist.get_world_size()
    for size in sizes:
        buf = torch.ones(size // 4, dtype=torch.float32)
        for _ in range(warmup):
            dist.all_reduce(buf)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        elapsed = torch.tensor([(time.perf_counter() - start) / iters])
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
        seconds = float(elapsed)
        if dist.get_rank() == 0:
            print(f"BARE {size} {seconds:.6f} {size / seconds / 1e9 * 2 * (n - 1) / n:.4f}",
                  flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
