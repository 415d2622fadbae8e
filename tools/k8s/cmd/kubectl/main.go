// Command kubectl is the upstream kubectl, built from k8s.io/kubectl at the same
// release as the API server it talks to (mirrors k8s.io/kubernetes/cmd/kubectl).
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
