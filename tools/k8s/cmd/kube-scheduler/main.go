// Command kube-scheduler is the upstream scheduler, built from the same k8s.io/kubernetes module as the
// API server, for the opt-in local node (localcluster.py up --node).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
