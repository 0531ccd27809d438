// Command etcd is the etcd server built from the etcd module version this
// repository pins, so a local container image can be made without a registry.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
