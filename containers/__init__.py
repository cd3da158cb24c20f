"""Build, test and run Apptainer/Singularity images of a PyTorch stack for HPC sites.

The package is the engine behind ``tasks.py``: it loads and validates manifests, env specs,
definitions and site profiles, plans builds as argv lists, runs them, and runs workloads inside
the images. Planning is pure; only :mod:`containers.host.runtime` starts processes.
"""

__version__ = "0.1.0"
