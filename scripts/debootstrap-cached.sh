#!/bin/sh
# debootstrap with the tool's shared package cache: first on PATH during a build whose base
# root comes from debootstrap (Apptainer's `Bootstrap: debootstrap` looks it up on the caller's
# PATH; recipes/scripts/foreign-root.sh calls it by name). It runs the real debootstrap with
# --cache-dir, under an exclusive flock: debootstrap checks every cached .deb against the
# signed Packages file's checksum (a bad one is fetched again), but writes downloads straight
# to their final name, so two at once could read each other's half-written file.
#
#   CONTAINERS_APT_CACHE    the cache folder (the tool's <cache>/packages/apt)
#   CONTAINERS_DEBOOTSTRAP  the real debootstrap
set -eu
cache=${CONTAINERS_APT_CACHE:?the package cache folder}
real=${CONTAINERS_DEBOOTSTRAP:?the real debootstrap}
mkdir -p "$cache"
echo "I: package cache: debootstrap --cache-dir=$cache"
exec flock "$cache/.lock" "$real" --cache-dir="$cache" "$@"
