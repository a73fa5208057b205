//go:build tools

// Package tools pins the NetworkPolicy enforcer this module builds (see scripts/testenv-enforcer.sh):
// kube-router's command, run with only its network-policy controller (iptables + ipset).
package tools

import _ "github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"
