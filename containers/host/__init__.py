"""The machine this tool runs on: the one process runner, the container runtime (apptainer or
singularity) and its argv, and the host's package sources and facts that builds inherit."""
