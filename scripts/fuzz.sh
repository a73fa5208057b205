#!/usr/bin/env bash
# Runs the fuzz targets (archive ingestion, JobSpec parsing) for a bounded time each.
# Not part of the test command. Usage: scripts/fuzz.sh [SECONDS_PER_TARGET]   (default 60)
#
# Installs cargo-fuzz from crates.io if missing. cargo-fuzz needs nightly-only compiler flags
# (sanitizers); the machine's one stable toolchain accepts them with RUSTC_BOOTSTRAP=1.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SECONDS_PER_TARGET="${1:-60}"
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
cd "$ROOT"
export RUSTC_BOOTSTRAP=1
for target in archive_ingest jobspec_parse; do
  echo "==> fuzzing $target for ${SECONDS_PER_TARGET}s" >&2
  mkdir -p "fuzz/corpus/$target"
  cargo fuzz run "$target" "fuzz/corpus/$target" -- -max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=1024
done
