//go:build tools

// Package tools pins the KubeRay operator command this module builds (see scripts/kueue-build.sh).
package tools

import _ "github.com/ray-project/kuberay/ray-operator"
