// Command registry is the conformance suite's image registry inside a
// cluster (kind): an OCI registry on :5000 that, once started, pushes the
// suite's image fixtures into itself (conformance.PushImageFixtures, signed
// with the suite's key) and then answers /ready. The suite's cases name it
// ${REGISTRY}: the Pod's IP and port, which the scanner reaches over plain
// HTTP (a private address).
package main

import (
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"github.com/tally-dev/tally/conformance"
	"github.com/tally-dev/tally/engine/imageverify/sigverify/sigtest"
)

func main() {
	reg, err := sigtest.Start(":5000")
	if err != nil {
		fmt.Fprintln(os.Stderr, "registry:", err)
		os.Exit(1)
	}
	reg.Host = "127.0.0.1:5000" // pushed to itself over loopback
	var ready atomic.Bool
	go func() {
		mux := http.NewServeMux()
		mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) {
			if !ready.Load() {
				http.Error(w, "pushing the fixtures", http.StatusServiceUnavailable)
				return
			}
			fmt.Fprintln(w, "ok")
		})
		if err := http.ListenAndServe(":5001", mux); err != nil {
			fmt.Fprintln(os.Stderr, "registry: readiness:", err)
			os.Exit(1)
		}
	}()
	if err := conformance.PushImageFixtures(reg); err != nil {
		fmt.Fprintln(os.Stderr, "registry: fixtures:", err)
		os.Exit(1)
	}
	ready.Store(true)
	fmt.Println("registry: the suite's images are served on :5000")
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	<-sig
	reg.Stop()
}
