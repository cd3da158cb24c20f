"""Stage 3, running: a workload planned as one ``<runtime> exec … torchrun …`` argv with the site's
GPU flag, binds and environment, started by a launcher (torchrun, srun, mpiexec) on one node or
across an allocation, and run with a timeout that leaves no process behind."""
