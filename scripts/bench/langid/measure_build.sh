#!/usr/bin/env bash
# Cold build time, binary size, dependency count and peak memory of each candidate crate.
#
# Builds the langid-bench harness once per crate (`--no-default-features --features X`,
# and once with no crate at all as the baseline), each in an empty target directory, with
# `cargo build --release` timed by bash's `time`. Dependencies are fetched first, so the
# times are compile times, not download times. Sizes are of the release binary with the
# main crate's release profile (debug = 0); "+size" is the difference to the baseline.
# "deps" counts the distinct packages of `cargo tree -e normal` (host target) less the
# harness itself; "new vs main" counts those not already in the main crate's Cargo.lock
# (same name and version).
#
#   cd scripts/bench/langid && CARGO_TARGET_DIR=/work/target-langid ./measure_build.sh
#
# Target directories: $CARGO_TARGET_DIR/cold-<crate> (removed and rebuilt each run).
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")"
root=${CARGO_TARGET_DIR:-/work/target-langid}
main_lock=../../../Cargo.lock
TIMEFORMAT='%R %U'

cargo fetch --quiet

lock_pkgs() { awk '/^name = /{n=$3} /^version = /{gsub(/"/,"",n); v=$3; gsub(/"/,"",v); print n" v"v}' "$1" | sort -u; }
main_pkgs=$(mktemp)
if [[ -f $main_lock ]]; then lock_pkgs "$main_lock" >"$main_pkgs"; fi

declare -A only=([none]="script rule only" [whatlang]="whatlang" [whichlang]="whichlang" [lingua]="lingua (high, 12)")
echo "| crate | cold build, wall s | cold build, CPU s (user) | binary bytes | +size vs none | deps | new vs main | peak RSS MiB (--only '${only[lingua]}' for lingua) | load avg before |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
base_size=0
for crate in none whatlang whichlang lingua; do
    feats=(--no-default-features)
    if [[ $crate != none ]]; then feats+=(--features "$crate"); fi
    dir=$root/cold-$crate
    rm -rf "$dir"
    load=$(cut -d' ' -f1 /proc/loadavg)
    t=$( { time CARGO_TARGET_DIR=$dir cargo build --release --offline --quiet "${feats[@]}" >/dev/null 2>&1; } 2>&1 )
    wall=${t% *}; user=${t#* }
    bin=$dir/release/langid-bench
    size=$(stat -c %s "$bin")
    if [[ $crate == none ]]; then base_size=$size; fi
    tree=$(cargo tree --offline -e normal "${feats[@]}" --prefix none | sed 's/ (\*)$//; s/ (proc-macro)$//' | sort -u | grep -v '^langid-bench ' || true)
    deps=0 new=0
    if [[ -n $tree ]]; then
        deps=$(wc -l <<<"$tree")
        new=$(comm -23 <(sort -u <<<"$tree") "$main_pkgs" | wc -l)
    fi
    rss=$("$bin" --no-timing --rss --only "${only[$crate]}" | awk '/^peak RSS/{print $3}')
    printf '| %s | %s | %s | %s | %+d | %s | %s | %s | %s |\n' "$crate" "$wall" "$user" "$size" $((size - base_size)) "$deps" "$new" "$rss" "$load"
done
rm -f "$main_pkgs"
