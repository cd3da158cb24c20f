"""Stage 2, the build: pure planning from a target to argv lists and an inputs hash, the builder
that executes a plan (Apptainer definitions or cotainr) atomically, and each image's provenance."""
