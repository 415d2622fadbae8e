//go:build tools

// Package tools pins the upstream KEDA commands in this module's build list; localcluster.py builds
// github.com/kedacore/keda/v2/cmd/operator and cmd/adapter directly (the upstream main packages, unmodified).
package tools

import (
	_ "github.com/kedacore/keda/v2/cmd/adapter"
	_ "github.com/kedacore/keda/v2/cmd/operator"
)
