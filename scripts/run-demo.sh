#!/usr/bin/env bash
# The main job of `make run`, on the bundled synthetic market: write a year (260 days) of 1-minute
# bars, check them, build their feature cache (what `vixen train FILE` reads), then train the DQN
# agent on the same market generated in memory — where its planted signal is known, so the
# evaluation can show the oracle beside the other baselines — for 60 epochs (about half a minute
# on two cores), validating every 5 and testing the best once on the last 15% of the bars.
set -euo pipefail
vixen=${1:-build/vixen}
dir=${2:-run}
mkdir -p "$dir"
"$vixen" data synth --days 260 --seed 1 --drift 0.05 --out "$dir/synth.csv"
"$vixen" data inspect "$dir/synth.csv"
"$vixen" data features "$dir/synth.csv" --cache "$dir/cache"
rm -rf "$dir/train"
"$vixen" train --set data.synth_days=260 --set data.synth_seed=1 --run "$dir/train"
