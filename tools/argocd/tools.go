//go:build tools

// Package tools pins the upstream argocd command in this module's build list; localcluster.py builds
// github.com/argoproj/argo-cd/v3/cmd directly (the upstream main package, unmodified).
package tools

import _ "github.com/argoproj/argo-cd/v3/cmd"
