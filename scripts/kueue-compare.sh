#!/usr/bin/env bash
# TunePlane and Kueue side by side on one real control plane: 1,000 fake GPU nodes in four series,
# four workloads (5,000 small jobs, 1,000 gang RayJobs, a flooding tenant and a late one, and a
# tenant taking back its quota from a borrower by preemption; --workloads picks some), each setup
# from a fresh cluster in turn: TunePlane and Kueue tuned at client QPS 50, 200 and 500, and Kueue
# as shipped (--systems tuneplane,kueue-tuned leaves it out). Both controllers run as ServiceAccounts under one audit policy, on the same
# KubeRay operator (v1.5.0, raised limits) and controller manager. Prints one table with ratios and
# writes target/kueue-compare/results.{json,md} and every run's logs; BENCHMARKS.md explains it.
#
#   scripts/kueue-compare.sh [harness options, see --help]
#
# Builds what it needs once per machine: the control plane (scripts/testenv-build.sh), Kueue and
# the comparison's KubeRay operator (scripts/kueue-build.sh), and the harness and node agent with
# Cargo's bench profile (optimised).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
say() { printf '[kueue-compare] %s\n' "$*" >&2; }
die() { printf '[kueue-compare] error: %s\n' "$*" >&2; exit 1; }

for a in "$@"; do
  if [[ $a == -h || $a == --help ]]; then
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    exec cargo bench --quiet --locked --manifest-path "$ROOT/Cargo.toml" --workspace --bench kueue_compare -- --help
  fi
done

start=$SECONDS
"$ROOT/scripts/testenv-build.sh" >/dev/null
BUILT="$("$ROOT/scripts/kueue-build.sh" | tail -n 2)"
KUBERAY="$(head -n 1 <<<"$BUILT")"
KUEUE="$(tail -n 1 <<<"$BUILT")"
say "building the harness and the node agent (cargo, bench profile)"
# The same targets as `cargo bench` below, so that both builds resolve the same features.
cargo build --quiet --locked --profile bench --workspace --bench kueue_compare --bin kubesim --manifest-path "$ROOT/Cargo.toml" \
  || die "cargo build of the node agent failed"
# The bench profile's artifacts live in target/release.
TARGET="$(cargo metadata --format-version 1 --no-deps --manifest-path "$ROOT/Cargo.toml" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
say "builds ready after $((SECONDS - start)) s"
export AWS_EC2_METADATA_DISABLED=true
cargo bench --quiet --locked --manifest-path "$ROOT/Cargo.toml" --workspace --bench kueue_compare -- \
  --kueue "$KUEUE" --kuberay "$KUBERAY" --agent "$TARGET/release/kubesim" "$@"
say "whole comparison, builds included: $((SECONDS - start)) s"
