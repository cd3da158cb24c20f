"""Stage 5, batch jobs: Slurm and PBS scripts for a site (scheduler directives, launcher argv,
the rendered shell script), printed, written or submitted."""
