//go:build tools

// Package tools pins the Kueue controller manager so `go build sigs.k8s.io/kueue/cmd/kueue` resolves
// against this module's go.sum.
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
