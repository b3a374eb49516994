#!/usr/bin/env bash
# Installs the Debian packages vixen's build and tests need, and returns at once when they are
# already there. Called by `make run` (what building and running need) and by `make test` as
# `deps.sh test` (adding the tools only the tests use); safe to run by hand.
set -euo pipefail

# libopenmpi-dev and openmpi-bin: `mpirun vixen hyperopt` (a study over several GPUs or hosts;
# without them vixen builds and studies run in one process)
packages=(cmake make gcc pkg-config libzstd-dev libcmocka-dev libxxhash-dev libopenblas-dev
    libyaml-dev libcjson-dev libsqlite3-dev libopenmpi-dev openmpi-bin)
# clang-format: scripts/format-check holds the sources to .clang-format. chromium and zlib1g-dev:
# test_report loads a run's report.html in a headless browser and decodes its screenshot (without
# a browser that part of the test is skipped). clang and libclang-rt-dev (libFuzzer and the
# sanitizer runtimes): scripts/fuzz builds and runs the fuzz targets of tests/fuzz.
[ "${1:-}" = test ] && packages+=(clang-format chromium zlib1g-dev clang libclang-rt-dev)

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
