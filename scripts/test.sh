#!/usr/bin/env bash
# The one test command (`scripts/test.sh`, also `make test`; `.ci/run` calls it): installs what the tests need on a fresh
# machine, then runs formatting and lint checks and every test of the workspace.
#
# Steps: system tools (zip, unzip) via apt-get when missing -> the repo's Python venv (moto_server
# and friends) -> cargo fmt --check -> cargo clippy -D warnings -> cargo test (all crates, with a
# private moto_server on 127.0.0.1 for the AWS adapters).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

step() { printf '\n==> %s\n' "$*" >&2; }

need_apt=()
for tool in zip unzip; do
  command -v "$tool" >/dev/null 2>&1 || need_apt+=("$tool")
done
# kubectl drives kubesim and renders infra/ with kustomize. Machines of this kind ship it; if one
# does not, take Debian's client (older, but enough for `get`, `logs` and `kustomize`).
if ! command -v kubectl >/dev/null 2>&1; then
  need_apt+=(kubernetes-client)
fi
# The console's browser tests drive Debian's headless Chromium through chromedriver.
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
command -v chromedriver >/dev/null 2>&1 || need_apt+=(chromium-driver)
if ((${#need_apt[@]})); then
  step "installing system packages: ${need_apt[*]}"
  if [[ $(id -u) -eq 0 ]]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  fi
fi

step "python venv (.venv)"
scripts/bootstrap-venv.sh

# The kubectl checks must run, not skip.
export KUBESIM_REQUIRE_KUBECTL=1
# Tests never reach a cloud: no credential lookups against instance metadata, loopback only.
export AWS_EC2_METADATA_DISABLED=true
# KubeRay CRDs for validating rendered RayJobs (read-only reference beside the checkout).
export TUNEPLANE_KUBERAY_SCHEMAS="${TUNEPLANE_KUBERAY_SCHEMAS:-$ROOT/../shared/schemas/kuberay}"

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo test (with a private moto_server on 127.0.0.1)"
scripts/with-moto.sh cargo test --workspace --locked
