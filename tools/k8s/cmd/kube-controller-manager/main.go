// Command kube-controller-manager is the upstream controller manager, built from the same
// k8s.io/kubernetes module as the API server, so that tests see garbage collection, namespace
// deletion and Deployment -> ReplicaSet (pods stay Pending: there is no kubelet).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
