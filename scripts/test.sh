#!/usr/bin/env bash
# The one test command (`scripts/test.sh`, also `make test`; `.ci/run` calls it): installs what the tests need on a fresh
# machine, then runs formatting and lint checks and every test of the workspace.
#
# Steps: system tools (zip, unzip, openssl, curl, ...) via apt-get when missing -> the repo's Python
# venv (moto_server and friends) -> a real Kubernetes control plane on 127.0.0.1 (etcd,
# kube-apiserver, controller manager, scheduler, KubeRay operator; built from the Go modules pinned
# in testenv/ once per machine, cached in ~/.cache/tuneplane-testenv) and the runtimes its node agent
# runs real pods with (pinned virtualenvs, Ray among them; same cache) -> cargo fmt --check -> cargo
# clippy -D warnings -> cargo test (all crates, with a private moto_server on 127.0.0.1 for the AWS
# adapters) -> the scenario suite again on the real control plane, then the RBAC audit.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

step() { printf '\n==> %s\n' "$*" >&2; }

need_apt=()
for tool in zip unzip openssl curl wget; do
  command -v "$tool" >/dev/null 2>&1 || need_apt+=("$tool")
done
# kubectl drives kubesim and renders infra/ with kustomize. Machines of this kind ship it; if one
# does not, take Debian's client (older, but enough for `get`, `logs` and `kustomize`).
if ! command -v kubectl >/dev/null 2>&1; then
  need_apt+=(kubernetes-client)
fi
# The real tier's node agent makes pods' network namespaces with ip (iproute2).
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
# Its NetworkPolicy enforcer (kube-router's firewall) programs iptables and ipset.
command -v iptables >/dev/null 2>&1 || need_apt+=(iptables)
command -v ipset >/dev/null 2>&1 || need_apt+=(ipset)
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
# One full build, kept small: no incremental caches (they only help repeated edits, and took
# gigabytes of a CI disk).
export CARGO_INCREMENTAL=0
# KubeRay CRDs for validating rendered RayJobs (read-only reference beside the checkout).
# Without that reference folder (a clone elsewhere), the CRDs of the KubeRay operator module the
# test tier builds are used (testenv-build.sh copies them beside its binaries; cached).
if [[ -z "${TUNEPLANE_KUBERAY_SCHEMAS:-}" ]]; then
  if [[ -f "$ROOT/../shared/schemas/kuberay/ray.io_rayjobs.yaml" ]]; then
    TUNEPLANE_KUBERAY_SCHEMAS="$ROOT/../shared/schemas/kuberay"
  else
    TUNEPLANE_KUBERAY_SCHEMAS="$(dirname "$(scripts/testenv-build.sh | tail -n 1)")/crds"
  fi
fi
export TUNEPLANE_KUBERAY_SCHEMAS

step "real control plane (scripts/k8s-up.sh --no-fleet; the first run on a machine builds it from Go modules)"
K8S_DIR="$ROOT/target/k8s-test"
K8S_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
trap 'scripts/k8s-down.sh --dir "$K8S_DIR" --quiet || true' EXIT
REAL_KUBECONFIG=$(scripts/k8s-up.sh --no-fleet --dir "$K8S_DIR" --port "$K8S_PORT" | tail -n 1)
# The real tier's node agent runs pods for real (as root: network namespaces, mounts) with the
# runtimes of testenv/images.yaml.
[[ $(id -u) -eq 0 ]] || { echo "test.sh: the real tier runs pods in network namespaces of their own, which needs root (CI and the sessions run as root)" >&2; exit 1; }
step "runtimes of the real tier's pods (scripts/testenv-runtimes.sh; built once per machine)"
TUNEPLANE_RUNTIMES=$(scripts/testenv-runtimes.sh | tail -n 1)
export TUNEPLANE_RUNTIMES
step "NetworkPolicy evaluator (scripts/testenv-netpol.sh; built once per machine)"
TUNEPLANE_NETPOL_EVAL=$(scripts/testenv-netpol.sh | tail -n 1)
export TUNEPLANE_NETPOL_EVAL

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --all-targets -- -D warnings"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "the client-only CLI still builds (cargo check --no-default-features: no dev/demo stack)"
cargo check --locked -p tuneplane --no-default-features --bins

step "cargo test (with a private moto_server on 127.0.0.1)"
scripts/with-moto.sh cargo test --workspace --locked

# The same scenarios against the real API server, scheduler, controller manager and KubeRay
# operator: one shared cluster, so one test at a time; each scenario starts from a clean slate.
# `--workspace` keeps the feature resolution of the run above: `-p <crate>` resolves features for
# that crate alone, which rebuilt every dependency a second time (and filled CI's disk).
step "scenario suite on the real control plane (TUNEPLANE_TEST_K8S=real)"
export TUNEPLANE_TEST_KUBECONFIG="$REAL_KUBECONFIG"
TUNEPLANE_TEST_K8S=real cargo test --workspace --locked \
  --test lifecycle --test pending --test placement --test sharing --test cleanup --test leader --test crash \
  --test differential --test rbac_real --test agent_cluster --test real_cluster --test real_logs \
  --test rendered_examples --test isolation -- --test-threads=1

step "the reconciler's requests in the API server's audit log match infra/kustomize's RBAC"
TUNEPLANE_TEST_K8S=real TUNEPLANE_TEST_AUDIT_LOG="$K8S_DIR/logs/audit.log" \
  cargo test --workspace --locked --test rbac_real -- --nocapture --test-threads=1 \
  the_audit_log_shows_every_grant_used
