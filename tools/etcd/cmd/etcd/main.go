// Command etcd is the upstream etcd server (>= 3.5.13, which the API server's watch
// progress requests need), built from go.etcd.io/etcd/server/v3.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
