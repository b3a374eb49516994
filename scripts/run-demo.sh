#!/usr/bin/env bash
# The main job of `make run` on the bundled (synthetic) market: write 60 days of bars, build the
# feature cache, and step 4,096 environments with a random policy. Training arrives with the
# learner; until then this shows the data path and the environment end to end.
set -euo pipefail
vixen=${1:-build/vixen}
dir=${2:-run}
mkdir -p "$dir"
"$vixen" data synth --days 60 --seed 1 --out "$dir/synth.csv"
"$vixen" data inspect "$dir/synth.csv"
"$vixen" data features "$dir/synth.csv" --cache "$dir/cache"
"$vixen" env bench "$dir/synth.csv" --cache "$dir/cache" --envs 4096 --steps 2000
