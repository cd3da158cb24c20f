"""Stage 4, the proof: workload kinds (``smoke``: the all_reduce benchmark; ``train``: the DDP /
DeepSpeed / FSDP examples) planned and run one way (``kind``), judged by the same two gates and
recorded in one ``verdict.json`` shape (``verdict``: sanity, performance against site references),
the transport proof and the perflog history."""
