// Command pause is the infrastructure container of every Pod on tally's kind
// node image: it holds the Pod's namespaces open, reaps the zombies it
// inherits as PID 1 of a shared PID namespace, and exits on SIGINT or
// SIGTERM. It is built statically (CGO_ENABLED=0) into an image with nothing
// else in it, under the name the kubelet asks containerd for.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range signals {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
