// Command kube-apiserver is the upstream API server, built from the k8s.io/kubernetes
// Go module so that tests run against a real control plane without downloaded binaries.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
