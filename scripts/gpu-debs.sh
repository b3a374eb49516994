#!/usr/bin/env bash
# Fetches the .deb files the GPU machine lacks (it reaches no package registry) into .deps/, an
# ignored folder that travels with a device call (name it in `carry`); scripts/gpu-check unpacks
# them into a private prefix. Run on a Debian machine with apt.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .deps
cd .deps
apt-get download libcmocka0 libcmocka-dev libxxhash-dev libyaml-0-2 libyaml-dev libcjson1 libcjson-dev \
    libsqlite3-0 libsqlite3-dev
ls -1
