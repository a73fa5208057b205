#!/usr/bin/env bash
# Stops the control plane that scripts/k8s-up.sh started (node agent, KubeRay operator, scheduler,
# controller manager, API server, etcd, in that order) and keeps its logs.
#   scripts/k8s-down.sh [--dir DIR] [--quiet]
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${TUNEPLANE_K8S_DIR:-$ROOT/.tuneplane-k8s}"
QUIET=0
while (($#)); do
  case "$1" in
    --dir) DIR="$2"; shift 2 ;;
    --quiet) QUIET=1; shift ;;
    *) echo "k8s-down: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

stopped=0
for name in node-agent kuberay-operator kube-scheduler kube-controller-manager kube-apiserver etcd; do
  pidfile="$DIR/run/$name.pid"
  [[ -f "$pidfile" ]] || continue
  pid=$(cat "$pidfile")
  if kill -0 "$pid" 2>/dev/null; then
    # Each component leads a process group of its own (setsid): stop the group.
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    stopped=$((stopped + 1))
  fi
  rm -f "$pidfile"
done
((QUIET)) || echo "[k8s-down] stopped $stopped component(s); logs kept in $DIR/logs" >&2
