#!/usr/bin/env bash
# The main job of `make run`, on the bundled synthetic market: write 60 days of 1-minute bars,
# check them, build the feature cache, train the DQN agent for 30 epochs (about a minute on two
# cores) through that cache, and print its evaluation on the held-out bars.
set -euo pipefail
vixen=${1:-build/vixen}
dir=${2:-run}
mkdir -p "$dir"
"$vixen" data synth --days 60 --seed 1 --out "$dir/synth.csv"
"$vixen" data inspect "$dir/synth.csv"
"$vixen" data features "$dir/synth.csv" --cache "$dir/cache"
rm -rf "$dir/train"
"$vixen" train "$dir/synth.csv" --set data.cache="$dir/cache" --run "$dir/train"
