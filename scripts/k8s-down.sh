#!/usr/bin/env bash
# Stops the control plane that scripts/k8s-up.sh started (node agent, KubeRay operator, scheduler,
# controller manager, API server, etcd, in that order) and keeps its logs. What the node agent's real
# pods left running goes with their network namespaces (tp-*), and the pods' bridge with them; the
# NetworkPolicy enforcer's iptables chains and ipsets are removed after it stops (it leaves them).
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
for name in network-policy node-agent kuberay-operator kube-scheduler kube-controller-manager kube-apiserver etcd; do
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
# The real pods: every process in a pod namespace, then the namespaces and the bridge.
if [[ -d /var/run/netns ]] && command -v ip >/dev/null 2>&1; then
  for ns in $(ls /var/run/netns 2>/dev/null | grep '^tp-' || true); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [[ -n "$pids" ]] && kill -KILL $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del tp-pods0 2>/dev/null || true
fi
# kube-router's rules and sets (its own --cleanup-config panics in v2.1.0 without removing them).
# The rules are read once, into a variable: `iptables-save | grep -q` under pipefail fails when
# grep stops reading early (SIGPIPE), which skipped this cleanup and left a dead pod's firewall
# chain on an IP the next cluster hands out again.
rules=""
command -v iptables-save >/dev/null 2>&1 && rules="$(iptables-save -t filter 2>/dev/null || true)"
if grep -q 'KUBE-ROUTER-\|KUBE-NWPLCY-\|KUBE-POD-FW-' <<<"$rules"; then
  pat='KUBE-ROUTER-(INPUT|FORWARD|OUTPUT)|KUBE-NWPLCY-|KUBE-POD-FW-'
  grep -Ev -- "^:($pat)|^-A ($pat)|-j ($pat)" <<<"$rules" | iptables-restore \
    || echo "[k8s-down] warning: kube-router's iptables rules could not be removed (iptables -S | grep KUBE-ROUTER)" >&2
fi
if command -v ipset >/dev/null 2>&1; then
  ipset list -n 2>/dev/null | grep -E '^KUBE-(SRC|DST)-' | xargs -r -n1 ipset destroy 2>/dev/null || true
fi
((QUIET)) || echo "[k8s-down] stopped $stopped component(s); logs kept in $DIR/logs" >&2
