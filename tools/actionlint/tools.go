//go:build tools

// Package tools pins the upstream actionlint command in this module's build list; localcluster.py builds
// github.com/rhysd/actionlint/cmd/actionlint directly (the upstream main package, unmodified).
package tools

import _ "github.com/rhysd/actionlint/cmd/actionlint"
