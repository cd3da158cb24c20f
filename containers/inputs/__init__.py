"""Stage 1, the inputs: recipes (image manifests), Conda env specs, Apptainer definitions and site
profiles, read and validated into typed models. Errors name the file, the line and the key."""
