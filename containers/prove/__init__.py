"""Stage 4, the proof: the smoke (all_reduce) and training workloads' verdicts (sanity,
performance against site references, transport), the perflog history and the reports."""
