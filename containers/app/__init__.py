"""The application layer: what each command does, as plain functions ``tasks.py`` calls.

Each task imports its command's module when it runs, so ``invoke --list`` pays for none. The
impure edge (functions take ``say`` for output), which no engine module imports."""
