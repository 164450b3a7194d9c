// Command etcd builds the etcd server from Go modules so that macvirt's
// envtest suites can run without prebuilt binaries.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
