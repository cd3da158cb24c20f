"""Stage 4, the proof: workload kinds (smoke, train, run, build) planned and run one way, judged
by the same two gates (sanity, performance) and recorded in one ``verdict.json`` shape."""
