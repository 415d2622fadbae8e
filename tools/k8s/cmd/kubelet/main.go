// Command kubelet is the upstream kubelet, built from the same k8s.io/kubernetes module as the API
// server, for the opt-in local node (localcluster.py up --node) that runs Pods with containerd + runc.
package main

import (
	"context"
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/kubernetes/cmd/kubelet/app"
)

func main() {
	os.Exit(cli.Run(app.NewKubeletCommand(context.Background())))
}
