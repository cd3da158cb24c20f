"""Build, test and run Apptainer/Singularity images of a PyTorch stack for HPC sites: the engine
behind ``tasks.py``. Planning is pure; only :mod:`containers.host.process` starts processes."""

__version__ = "0.1.0"
