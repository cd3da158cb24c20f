"""Stage 2, the image: pure planning from a target to argv lists and an inputs hash, the builder
that executes a plan (Apptainer definitions or cotainr) atomically, and each image's provenance.
(Not named ``build``: tools treat folders of that name as build output and skip or ignore them.)"""
