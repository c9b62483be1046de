// Command pipelinebench measures the whole reporting pipeline as a user
// sees it, and what it costs the cluster: on the local control plane (etcd,
// kube-apiserver, kube-controller-manager), tally-scanner and tally-merger
// run with the Pod Security Standards policies while N Pods are created;
// it reports the time from the last Pod to the last PolicyReport, the CPU
// and peak memory of the API server, etcd and tally's processes, the
// objects kept and etcd's size, an idle stretch after, and how long a new
// Pod waits for its PolicyReport. --baseline creates the same Pods with
// nothing reporting, so that the API server's cost of reporting can be
// told apart from the cost of the Pods.
//
//	go run ./hack/pipelinebench --pods 10000 [--baseline] [--idle 60s]
//
// PIPELINEBENCH_APICPU=file saves a 60 s CPU profile of the API server from
// the last Pod on; PIPELINEBENCH_APIHEAP=file its heap once every
// PolicyReport is written.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/tally-dev/tally/e2e/cluster"
	"github.com/tally-dev/tally/e2e/reportsserver"
	"github.com/tally-dev/tally/hack/benchutil"
	"github.com/tally-dev/tally/internal/pss"
)

var (
	gvrClusterPolicy = schema.GroupVersionResource{Group: "kyverno.io", Version: "v1", Resource: "clusterpolicies"}
	gvrPolicyReports = schema.GroupVersionResource{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "policyreports"}
)

type options struct {
	pods, namespaces, latencyPods int
	corpus, scannerBin, mergerBin string
	qps, burst                    string
	baseline, throughWebhook      bool
	floor, reportsServer          bool
	idle                          time.Duration
	// replicas are the scanner pairs, sharding the namespaces (--sharding)
	// when more than one.
	replicas int
	// scannerFlags are added to each scanner's command line; heapProfiles
	// is where the heap profiles go ("": nowhere).
	scannerFlags []string
	heapProfiles string
}

func main() {
	var o options
	flag.IntVar(&o.pods, "pods", 1000, "Pods to create")
	flag.IntVar(&o.namespaces, "namespaces", 50, "namespaces to spread them over")
	flag.IntVar(&o.latencyPods, "latency-pods", 50, "Pods created one by one afterwards, to time each one's PolicyReport")
	flag.StringVar(&o.corpus, "corpus", "../shared/corpus", "the corpus holding policy-library/pod-security")
	flag.StringVar(&o.scannerBin, "scanner-bin", "", "a prebuilt tally-scanner (default: build ./cmd/tally-scanner)")
	flag.StringVar(&o.mergerBin, "merger-bin", "", "a prebuilt tally-merger (default: build ./cmd/tally-merger)")
	flag.BoolVar(&o.baseline, "baseline", false, "create the Pods with nothing reporting")
	flag.BoolVar(&o.throughWebhook, "through-webhook", false, "send the Pods' creation through tally-scanner's admission webhook (a ValidatingWebhookConfiguration calling it on 127.0.0.1, failurePolicy Ignore), so admission is part of the bill (an AdmissionReport for what no scan recomputes)")
	flag.BoolVar(&o.floor, "floor", false, "instead of tally, a writer in this process creates exactly the PolicyReports (Kyverno's fields, one create each) and violation Events tally writes for the Pods, and nothing else: what the reports cost the API server at the least")
	flag.StringVar(&o.qps, "kube-api-qps", "100", "tally's --kube-api-qps (default: tally's own default)")
	flag.StringVar(&o.burst, "kube-api-burst", "200", "tally's --kube-api-burst (default: tally's own default)")
	flag.IntVar(&o.replicas, "replicas", 1, "scanner pairs (tally-scanner + tally-merger) sharing the namespaces through membership Leases (--sharding); 1 runs one unsharded pair; more measures each pair and, in place of the restart, the hand-over when one pair is killed")
	flag.DurationVar(&o.idle, "idle", time.Minute, "the idle stretch measured after the full scan")
	flag.Func("scanner-flag", "a flag added to each tally-scanner's command line (repeat it: --scanner-flag=--omit-events=PolicyViolation)", func(v string) error {
		o.scannerFlags = append(o.scannerFlags, v)
		return nil
	})
	flag.StringVar(&o.heapProfiles, "heap-profiles", "", "a directory to save each scanner's and merger's heap profile in, taken with the live heaps after the full scan (scanner-N.pb.gz, merger-N.pb.gz; go tool pprof reads them)")
	flag.BoolVar(&o.reportsServer, "reports-server", false, "store the report kinds in reports-server (built from ../shared/third_party, with an etcd of its own: e2e/reportsserver) instead of the cluster's etcd; its CPU and memory are reported beside the API server's")
	gomemlimit := flag.String("gomemlimit", "", "GOMEMLIMIT of tally's processes (the chart sets 900MiB for the scanner, 230MiB for the merger); empty: none")
	flag.Parse()
	if *gomemlimit != "" {
		processEnv = []string{"GOMEMLIMIT=" + *gomemlimit}
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "pipelinebench:", err)
		os.Exit(1)
	}
}

// daemon is a running tally process.
type daemon struct {
	*benchutil.Process
	// anonPeak is the largest anonymous resident set sampled (KiB).
	anonPeak atomic.Int64
}

// processEnv is added to the environment of tally's processes (--gomemlimit).
var processEnv []string

func start(bin, name, kubeconfig string, extra ...string) (*daemon, error) {
	p, err := benchutil.StartProcessEnv(bin, name, kubeconfig, processEnv, extra...)
	if err != nil {
		return nil, err
	}
	d := &daemon{Process: p}
	go d.sampleAnon()
	return d, nil
}

// sampleAnon samples the process's anonymous resident set every 100 ms
// until it ends: its peak is the memory the process itself allocated,
// without the pages of its binary (about 32 MiB of tally-scanner's
// resident set, the same in every replica and shared by processes of one
// binary).
func (d *daemon) sampleAnon() {
	pid := d.Cmd.Process.Pid
	for {
		kb := int64(benchutil.AnonRSS(pid))
		if kb == 0 {
			return // gone
		}
		if kb > d.anonPeak.Load() {
			d.anonPeak.Store(kb)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (d *daemon) stop() { d.Stop() }

// pair is a scanner and the merger beside it.
type pair struct {
	scanner, merger *daemon
	handover        string
}

// pairs are the running scanner pairs.
type pairs []*pair

func (ps pairs) ready() bool {
	for _, p := range ps {
		if !p.scanner.Ready() || !p.merger.Ready() {
			return false
		}
	}
	return true
}

// sum adds a metric over the scanners (merger false) or the mergers.
func (ps pairs) sum(merger bool, name string) float64 {
	var total float64
	for _, p := range ps {
		d := p.scanner
		if merger {
			d = p.merger
		}
		v, _ := d.Value(name)
		total += v
	}
	return total
}

// cpu is the CPU of the scanners and of the mergers.
func (ps pairs) cpu() (scanner, merger float64) {
	for _, p := range ps {
		scanner += p.scanner.cpu()
		merger += p.merger.cpu()
	}
	return scanner, merger
}

func (ps pairs) stop() {
	for _, p := range ps {
		p.scanner.stop()
		p.merger.stop()
	}
}

// handedOver reports whether each pair's scanner has scanned the shard it
// has now (its hand-over is ready), among members live members.
func (ps pairs) handedOver(members int) bool {
	for _, p := range ps {
		if m, err := p.scanner.Value("tally_shard_members"); err != nil || int(m) != members {
			return false
		}
		resp, err := http.Get("http://" + p.handover + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close() // the status is all that is read
		if resp.StatusCode != http.StatusOK {
			return false
		}
	}
	return true
}

// print prints each pair's CPU (since the given) and peak memory, and the
// resources its scanner holds.
func (ps pairs) print(since map[*daemon]float64) {
	for i, p := range ps {
		held, _ := p.scanner.Value("tally_scan_stored_resources")
		owned, _ := p.scanner.Value("tally_shard_namespaces_owned")
		// Evaluations since the pair's current shard started (its metrics
		// registry is the shard's): as many as the resources held when
		// each was evaluated once. A policy's periodic scan counts each
		// resource again (for that policy alone): the first periodic scans
		// are spread over the interval (an hour) by the policies' names, and
		// some of the 17 fall due within the first minutes.
		evaluated, _ := p.scanner.Value("tally_scan_resources_processed_total")
		fmt.Printf("  pair %d: tally-scanner %.1f s, peak %.0f MiB (anonymous %.0f), %.0f resources in %.0f namespaces, %.0f evaluations (periodic scans' included); tally-merger %.1f s, peak %.0f MiB (anonymous %.0f)\n",
			i, p.scanner.cpu()-since[p.scanner], p.scanner.rss(), p.scanner.anon(), held, owned, evaluated, p.merger.cpu()-since[p.merger], p.merger.rss(), p.merger.anon())
	}
}

// liveHeaps prints each scanner's and merger's heap in use after a
// garbage collection (asked through pprof's heap profile with gc=1): what
// each holds, apart from the garbage its peak RSS also counts. The profiles
// are saved in profiles, unless "".
func (ps pairs) liveHeaps(profiles string) {
	heap := func(d *daemon, name string) float64 {
		out := os.DevNull
		if profiles != "" {
			out = filepath.Join(profiles, name+".pb.gz")
		}
		if err := benchutil.Fetch(d.Base+"/debug/pprof/heap?gc=1", out); err != nil {
			return -1
		}
		v, err := d.Value("go_memstats_heap_inuse_bytes")
		if err != nil {
			return -1
		}
		return v / (1 << 20)
	}
	var parts []string
	for i, p := range ps {
		parts = append(parts, fmt.Sprintf("pair %d: tally-scanner %.0f MiB, tally-merger %.0f MiB", i, heap(p.scanner, fmt.Sprintf("scanner-%d", i)), heap(p.merger, fmt.Sprintf("merger-%d", i))))
	}
	fmt.Printf("live heap after a garbage collection: %s\n", strings.Join(parts, "; "))
}

func (ps pairs) cpus() map[*daemon]float64 {
	out := map[*daemon]float64{}
	for _, p := range ps {
		out[p.scanner], out[p.merger] = p.scanner.cpu(), p.merger.cpu()
	}
	return out
}

func (d *daemon) cpu() float64  { return benchutil.ProcessCPU(d.Cmd.Process.Pid) }
func (d *daemon) rss() float64  { return float64(benchutil.PeakRSS(d.Cmd.Process.Pid)) / 1024 }
func (d *daemon) anon() float64 { return float64(d.anonPeak.Load()) / 1024 }

// build compiles a command into a temporary binary unless one is given.
func build(root, given, pkg string) (string, error) {
	if given != "" {
		return given, nil
	}
	bin := filepath.Join(os.TempDir(), filepath.Base(pkg)+"-pipelinebench")
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stderr, os.Stderr
	return bin, cmd.Run()
}

func run(o options) error {
	ctx := context.Background()
	root, err := cluster.RepoRoot()
	if err != nil {
		return err
	}
	c, err := benchutil.StartCluster(ctx, cluster.Options{Aggregator: o.reportsServer})
	if err != nil {
		return err
	}
	defer c.Stop()
	if o.reportsServer {
		dir, err := os.MkdirTemp("", "pipelinebench-reports-server-")
		if err != nil {
			return err
		}
		rs, err := reportsserver.Start(ctx, c.Cluster, dir)
		if err != nil {
			return err
		}
		defer rs.Stop()
		fmt.Printf("reports-server serves the report kinds, stored in its own etcd (logs in %s)\n", dir)
	}
	kube, dyn := c.Kube, c.Dyn
	var running pairs
	var restart func() error // starts the scanner pairs (again)
	var floor *floorWriter
	runsTally := !o.baseline && !o.floor
	policies := 0
	if o.floor {
		if o.baseline || o.throughWebhook {
			return fmt.Errorf("--floor is neither --baseline nor --through-webhook")
		}
		if policies, err = installPolicies(ctx, dyn, filepath.Join(o.corpus, "policy-library", "pod-security"), false); err != nil {
			return err
		}
		if floor, err = startFloor(ctx, kube, dyn, filepath.Join(o.corpus, "policy-library", "pod-security")); err != nil {
			return err
		}
		defer floor.stop()
		fmt.Printf("floor: %d Pod Security Standards ClusterPolicies, their reports written by the bench itself\n", policies)
	} else if !o.baseline {
		policies, err = installPolicies(ctx, dyn, filepath.Join(o.corpus, "policy-library", "pod-security"), o.throughWebhook)
		if err != nil {
			return err
		}
		fmt.Printf("installed %d Pod Security Standards ClusterPolicies\n", policies)
		sbin, err := build(root, o.scannerBin, "./cmd/tally-scanner")
		if err != nil {
			return err
		}
		mbin, err := build(root, o.mergerBin, "./cmd/tally-merger")
		if err != nil {
			return err
		}
		limits := []string{"--kube-api-qps", o.qps, "--kube-api-burst", o.burst}
		webhook := []string{"--webhook-listen", ""}
		if o.throughWebhook {
			if webhook, err = webhookConfiguration(ctx, kube); err != nil {
				return err
			}
		}
		restart = func() error {
			running = nil
			for i := range o.replicas {
				// The merger reads the scanner's reports on loopback, as in the Pod.
				handover, err := benchutil.FreeAddr()
				if err != nil {
					return err
				}
				args := append(append(slices.Clone(limits), webhook...), "--handover-listen", handover)
				args = append(args, o.scannerFlags...)
				if o.replicas > 1 {
					args = append(args, "--sharding", "--identity", fmt.Sprintf("bench-%d", i))
				} else {
					args = append(args, "--sharding=false")
				}
				p := &pair{handover: handover}
				if p.scanner, err = start(sbin, "tally-scanner", c.Kubeconfig, args...); err != nil {
					return err
				}
				if p.merger, err = start(mbin, "tally-merger", c.Kubeconfig, append(slices.Clone(limits), "--scanner-url", "http://"+handover)...); err != nil {
					p.scanner.stop()
					return err
				}
				running = append(running, p)
				if o.throughWebhook {
					webhook = []string{"--webhook-listen", ""} // one webhook: the first pair's
				}
			}
			return nil
		}
		if err := restart(); err != nil {
			return err
		}
		defer func() { running.stop() }()
		if err := waitFor(2*time.Minute, func() bool { return running.ready() && (o.replicas == 1 || running.handedOver(o.replicas)) }); err != nil {
			return fmt.Errorf("tally not ready: %w (logs %s, %s)", err, running[0].scanner.Log, running[0].merger.Log)
		}
	}

	req0, err := requestCounts(ctx, kube)
	if err != nil {
		return err
	}
	cpu0 := benchutil.ChildCPU()
	var tally0 [2]float64
	var pairs0 map[*daemon]float64
	if !o.baseline && !o.floor {
		tally0[0], tally0[1] = running.cpu()
		pairs0 = running.cpus()
	}
	t0 := time.Now()
	if err := benchutil.CreatePods(ctx, kube, o.pods, o.namespaces); err != nil {
		return err
	}
	lastPod := time.Now()
	if out := os.Getenv("PIPELINEBENCH_APICPU"); out != "" {
		// A CPU profile of the API server over the 60 s after the last Pod:
		// the reporting, apart from the Pods' creation.
		go func() {
			data, err := kube.Discovery().RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "60").DoRaw(ctx)
			if err == nil {
				err = os.WriteFile(out, data, 0o644)
			}
			if err != nil {
				fmt.Fprintln(os.Stderr, "API server CPU profile:", err)
			}
		}()
	}
	fmt.Printf("created %d Pods in %d namespaces in %s\n", o.pods, o.namespaces, lastPod.Sub(t0).Round(time.Millisecond))
	if o.floor {
		if err := waitFor(30*time.Minute, func() bool { return floor.written.Load() >= int64(o.pods) }); err != nil {
			return fmt.Errorf("floor: %d PolicyReports written, %d failed: %w", floor.written.Load(), floor.failed.Load(), err)
		}
		done := time.Now()
		fmt.Printf("every Pod has its PolicyReport: %s after the last Pod (%s from the first)\n",
			done.Sub(lastPod).Round(100*time.Millisecond), done.Sub(t0).Round(100*time.Millisecond))
	} else if !o.baseline {
		err := waitFor(30*time.Minute, func() bool {
			return running.sum(true, "tally_merge_report_writes_total") >= float64(o.pods) && running.ready()
		})
		if err != nil {
			return fmt.Errorf("PolicyReports not all written: %w (logs %s, %s)", err, running[0].scanner.Log, running[0].merger.Log)
		}
		done := time.Now()
		fmt.Printf("every Pod has its PolicyReport: %s after the last Pod (%s from the first)\n",
			done.Sub(lastPod).Round(100*time.Millisecond), done.Sub(t0).Round(100*time.Millisecond))
	}
	cpu1 := benchutil.ChildCPU()
	fmt.Printf("CPU from the first Pod to the last PolicyReport: kube-apiserver %.1f s, etcd %.1f s, kube-controller-manager %.1f s",
		cpu1["kube-apiserver"]-cpu0["kube-apiserver"], cpu1["etcd"]-cpu0["etcd"], cpu1["kube-controller"]-cpu0["kube-controller"])
	if o.reportsServer {
		fmt.Printf(", reports-server %.1f s, its etcd %.1f s",
			cpu1[reportsserver.Command]-cpu0[reportsserver.Command], cpu1[reportsserver.EtcdCommand]-cpu0[reportsserver.EtcdCommand])
	}
	if runsTally {
		sc, mc := running.cpu()
		fmt.Printf(", tally-scanner %.1f s, tally-merger %.1f s", sc-tally0[0], mc-tally0[1])
	}
	fmt.Println()
	if runsTally {
		running.print(pairs0)
	}
	req1, err := requestCounts(ctx, kube)
	if err != nil {
		return err
	}
	printRequests(req0, req1)
	pids := childPIDs()
	fmt.Printf("peak memory: kube-apiserver %.0f MiB, etcd %.0f MiB", rssMiB(pids["kube-apiserver"]), rssMiB(pids["etcd"]))
	if o.reportsServer {
		fmt.Printf(", reports-server %.0f MiB, its etcd %.0f MiB", rssMiB(pids[reportsserver.Command]), rssMiB(pids[reportsserver.EtcdCommand]))
	}
	if runsTally {
		var sr, mr float64
		for _, p := range running {
			sr, mr = max(sr, p.scanner.rss()), max(mr, p.merger.rss())
		}
		fmt.Printf(", tally-scanner %.0f MiB, tally-merger %.0f MiB (the largest of %d)", sr, mr, len(running))
	}
	fmt.Println()
	if live, err := benchutil.APIServerLiveHeap(ctx, kube); err == nil {
		fmt.Printf("kube-apiserver live heap once every report is written, after a garbage collection: %.0f MiB\n", live/(1<<20))
	} else {
		return err
	}
	if out := os.Getenv("PIPELINEBENCH_APIHEAP"); out != "" {
		// The API server's heap once every report is written.
		data, err := kube.Discovery().RESTClient().Get().AbsPath("/debug/pprof/heap").DoRaw(ctx)
		if err == nil {
			err = os.WriteFile(out, data, 0o644)
		}
		if err != nil {
			return fmt.Errorf("API server heap profile: %w", err)
		}
	}

	// Nothing changes.
	i0 := benchutil.ChildCPU()
	var t1 [2]float64
	if runsTally {
		t1[0], t1[1] = running.cpu()
	}
	var evaluated0 float64
	if runsTally {
		evaluated0 = running.sum(false, "tally_scan_resources_processed_total")
	}
	if out := os.Getenv("PIPELINEBENCH_IDLECPU"); out != "" && runsTally {
		// A CPU profile of the (first) scanner over the idle stretch.
		if err := benchutil.Fetch(fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", running[0].scanner.Base, int(o.idle.Seconds())), out); err != nil {
			return err
		}
	} else {
		time.Sleep(o.idle)
	}
	i1 := benchutil.ChildCPU()
	fmt.Printf("idle %s: kube-apiserver %.2f s, etcd %.2f s", o.idle, i1["kube-apiserver"]-i0["kube-apiserver"], i1["etcd"]-i0["etcd"])
	if runsTally {
		evaluated1 := running.sum(false, "tally_scan_resources_processed_total")
		sc, mc := running.cpu()
		idleCPU := sc - t1[0]
		fmt.Printf(", tally-scanner %.2f s, tally-merger %.2f s of CPU (the scanner evaluated %.0f resources: periodic scans)\n",
			idleCPU, mc-t1[1], evaluated1-evaluated0)
		if e := evaluated1 - evaluated0; e > 0 {
			// Which minutes hold a policy's hourly scan is chance: the
			// average over the hour is what an idle cluster pays. All the
			// stretch's CPU is charged to its evaluations (an upper bound).
			perEval := idleCPU / e
			perMinute := perEval * float64(policies) * float64(o.pods) / 60
			fmt.Printf("idle on average: %d policies scanned once an hour over %d Pods at %.0f µs a resource: tally-scanner %.2f s of CPU a minute\n",
				policies, o.pods, perEval*1e6, perMinute)
		}
	} else {
		fmt.Println(" of CPU")
	}
	if runsTally {
		running.liveHeaps(o.heapProfiles)
	}
	fmt.Println("kept:")
	if err := storage(ctx, kube, dyn); err != nil {
		return err
	}

	if runsTally && o.replicas == 1 {
		// A restart of both with nothing changed: the scanner scans
		// everything again and hands it over; the merger writes nothing.
		running.stop()
		t := time.Now()
		if err := restart(); err != nil {
			return err
		}
		// The merger starts within a probe of its scanner being ready, and
		// is ready again once it has merged everything.
		var scannerReady time.Time
		err := waitFor(10*time.Minute, func() bool {
			if !running[0].scanner.Ready() {
				return false
			}
			if scannerReady.IsZero() {
				scannerReady = time.Now()
			}
			return time.Since(scannerReady) > 3*time.Second && running[0].merger.Ready()
		})
		if err != nil {
			return fmt.Errorf("after a restart: %w (logs %s, %s)", err, running[0].scanner.Log, running[0].merger.Log)
		}
		writes := running.sum(true, "tally_merge_report_writes_total")
		handed := running.sum(false, "tally_handover_puts_total")
		fmt.Printf("restart with nothing changed: ready in %s; %.0f reports handed over on loopback, %.0f final report writes\n",
			time.Since(t).Round(100*time.Millisecond), handed, writes)
	}
	if runsTally && o.replicas > 1 {
		// One pair killed without warning (SIGKILL: its Lease stays until
		// it expires): the others take its namespaces once they see it
		// dead, scan them and hand them over; nothing changed, so their
		// mergers write nothing.
		killed := running[len(running)-1]
		survivors := running[:len(running)-1]
		writes0 := survivors.sum(true, "tally_merge_report_writes_total")
		cpu0 := survivors.cpus()
		t := time.Now()
		_ = killed.scanner.Cmd.Process.Kill() // already gone: nothing to kill
		_ = killed.merger.Cmd.Process.Kill()
		_, _ = killed.scanner.Cmd.Process.Wait()
		_, _ = killed.merger.Cmd.Process.Wait()
		running = survivors
		var handed time.Time
		err := waitFor(10*time.Minute, func() bool {
			if !survivors.handedOver(len(survivors)) {
				return false
			}
			if handed.IsZero() {
				handed = time.Now()
			}
			// The mergers start within a probe of their scanner being ready.
			return time.Since(handed) > 3*time.Second && survivors.ready() && survivors.sum(false, "tally_scan_stored_resources") >= float64(o.pods)
		})
		if err != nil {
			return fmt.Errorf("after a pair was killed: %w (logs %s, %s)", err, survivors[0].scanner.Log, survivors[0].merger.Log)
		}
		writes := survivors.sum(true, "tally_merge_report_writes_total") - writes0
		fmt.Printf("one pair of %d killed: the others own its namespaces and scanned them %s later (its Lease expires after 15 s); %.0f final report writes\n",
			o.replicas, handed.Sub(t).Round(100*time.Millisecond), writes)
		survivors.print(cpu0)
	}
	if !o.baseline && o.latencyPods > 0 {
		if err := latency(ctx, kube, dyn, o.latencyPods); err != nil {
			return err
		}
	}
	return nil
}

// latency creates Pods one by one and times each one's PolicyReport.
func latency(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface, n int) error {
	const ns = "bench-latency"
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	w, err := dyn.Resource(gvrPolicyReports).Namespace(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	defer w.Stop()
	// A report's name is its resource's UID; one may show before the
	// Create call returns (early).
	var mu sync.Mutex
	created := map[string]time.Time{}
	early := map[string]time.Time{}
	seen := map[string]time.Duration{}
	go func() {
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			name := u.GetName()
			now := time.Now()
			mu.Lock()
			if at, ok := created[name]; ok {
				if _, dup := seen[name]; !dup {
					seen[name] = now.Sub(at)
				}
			} else if _, dup := early[name]; !dup {
				early[name] = now
			}
			mu.Unlock()
		}
	}()
	for i := range n {
		p := benchutil.BenchPod(100000 + i)
		at := time.Now()
		out, err := kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		mu.Lock()
		created[string(out.UID)] = at
		if t, ok := early[string(out.UID)]; ok {
			seen[string(out.UID)] = t.Sub(at)
		}
		mu.Unlock()
		time.Sleep(200 * time.Millisecond)
	}
	_ = waitFor(2*time.Minute, func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) >= n })
	mu.Lock()
	defer mu.Unlock()
	var d []time.Duration
	for _, v := range seen {
		d = append(d, v)
	}
	slices.Sort(d)
	if len(d) == 0 {
		return fmt.Errorf("no PolicyReport of the %d new Pods appeared", n)
	}
	q := func(f float64) time.Duration { return d[min(len(d)-1, int(f*float64(len(d))))].Round(time.Millisecond) }
	fmt.Printf("new Pods (%d, one per 200 ms): PolicyReport after p50 %s, p99 %s, max %s; %d of %d got one\n",
		n, q(0.5), q(0.99), d[len(d)-1].Round(time.Millisecond), len(d), n)
	return nil
}

// storage prints the objects the API server keeps and their JSON size (read
// with paged LISTs, after the measured stretches), and etcd's size.
func storage(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface) error {
	for _, gvr := range []schema.GroupVersionResource{
		{Version: "v1", Resource: "pods"},
		{Group: "kyverno.io", Version: "v2", Resource: "backgroundscanreports"},
		{Group: "kyverno.io", Version: "v2", Resource: "admissionreports"},
		{Group: "wgpolicyk8s.io", Version: "v1alpha2", Resource: "policyreports"},
		{Version: "v1", Resource: "events"},
	} {
		n, bytes, managed := 0, 0, 0
		opts := metav1.ListOptions{Limit: 500}
		for {
			list, err := dyn.Resource(gvr).List(ctx, opts)
			if err != nil {
				return fmt.Errorf("list %s: %w", gvr.Resource, err)
			}
			for _, item := range list.Items {
				n++
				data, _ := json.Marshal(item.Object)
				bytes += len(data)
				if mf := item.GetManagedFields(); len(mf) > 0 {
					m, _ := json.Marshal(mf)
					managed += len(m)
				}
			}
			if opts.Continue = list.GetContinue(); opts.Continue == "" {
				break
			}
		}
		avg := 0
		if n > 0 {
			avg = bytes / n
		}
		fmt.Printf("  %s: %d objects, %.1f MiB of JSON (%d bytes each on average, %.1f MiB of it managedFields)\n",
			gvr.Resource, n, float64(bytes)/(1<<20), avg, float64(managed)/(1<<20))
	}
	families, err := benchutil.APIServerMetrics(ctx, kube)
	if err != nil {
		return err
	}
	size := 0.0
	for _, m := range families["apiserver_storage_size_bytes"].GetMetric() {
		size += benchutil.Sample(m)
	}
	fmt.Printf("  etcd database: %.1f MiB\n", size/(1<<20))
	return nil
}

// installPolicies creates the Pod Security policies; audit sets every one
// to Audit (two of the library's are Enforce), so that Pods created through
// the webhook are admitted and reported, as in a cluster watching its
// reports before it enforces.
func installPolicies(ctx context.Context, dyn dynamic.Interface, dir string, audit bool) (int, error) {
	docs, err := pss.Read(dir)
	if err != nil {
		return 0, err
	}
	for _, obj := range docs {
		u := &unstructured.Unstructured{Object: obj}
		if audit {
			if err := unstructured.SetNestedField(obj, "Audit", "spec", "validationFailureAction"); err != nil {
				return 0, err
			}
		}
		if _, err := dyn.Resource(gvrClusterPolicy).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return 0, fmt.Errorf("%s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return len(docs), nil
}

// childPIDs are this process's children by command name.
func childPIDs() map[string]int {
	out := map[string]int{}
	me := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if comm, ppid, _, ok := benchutil.ProcStat(pid); ok && ppid == me {
			out[comm] = pid
		}
	}
	return out
}

func rssMiB(pid int) float64 { return float64(benchutil.PeakRSS(pid)) / 1024 }

func waitFor(timeout time.Duration, ok func() bool) error {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if ok() {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("not after %s", timeout)
}

// requestCounts reads the API server's request counters
// (apiserver_request_total) by "VERB resource" and its open long-running
// requests (apiserver_longrunning_requests, the WATCH streams) by
// "open WATCH resource".
func requestCounts(ctx context.Context, kube kubernetes.Interface) (map[string]float64, error) {
	families, err := benchutil.APIServerMetrics(ctx, kube)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for name, prefix := range map[string]string{"apiserver_request_total": "", "apiserver_longrunning_requests": "open "} {
		for _, m := range families[name].GetMetric() {
			labels := benchutil.Labels(m)
			if labels["resource"] == "" || labels["subresource"] != "" {
				continue
			}
			out[prefix+labels["verb"]+" "+labels["resource"]] += benchutil.Sample(m)
		}
	}
	return out, nil
}

// printRequests prints the requests made between two readings, most first,
// and the WATCH streams open at the second.
func printRequests(before, after map[string]float64) {
	type row struct {
		key string
		n   float64
	}
	var made, watches []row
	for k, v := range after {
		switch {
		case strings.HasPrefix(k, "open WATCH ") && v > 0:
			watches = append(watches, row{strings.TrimPrefix(k, "open WATCH "), v})
		case !strings.HasPrefix(k, "open ") && v-before[k] >= 1:
			made = append(made, row{k, v - before[k]})
		}
	}
	for _, rows := range [][]row{made, watches} {
		slices.SortFunc(rows, func(a, b row) int {
			if a.n != b.n {
				return cmp.Compare(b.n, a.n)
			}
			return strings.Compare(a.key, b.key)
		})
	}
	fmt.Print("API requests from the first Pod to the last PolicyReport:")
	for _, r := range made {
		fmt.Printf(" %s %.0f;", r.key, r.n)
	}
	fmt.Print("\nWATCH streams open:")
	for _, r := range watches {
		fmt.Printf(" %s %.0f;", r.key, r.n)
	}
	fmt.Println()
}

// webhookConfiguration creates the ValidatingWebhookConfiguration "tally"
// calling tally-scanner's webhook on a free loopback port, and returns the
// scanner's flags for it: the scanner generates its certificate (127.0.0.1
// is always among its names), sets the CA bundle and narrows the rules to
// what the policies match (the Pods), as in a cluster.
func webhookConfiguration(ctx context.Context, kube kubernetes.Interface) ([]string, error) {
	addr, err := benchutil.FreeAddr()
	if err != nil {
		return nil, err
	}
	url := "https://" + addr + "/validate"
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "tally"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "validate.tally.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{"kyverno.io"}, APIVersions: []string{"*"}, Resources: []string{"clusterpolicies", "policies"}},
			}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](10),
		}},
	}
	if _, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, vwc, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("webhook configuration: %w", err)
	}
	return []string{"--webhook-listen", addr, "--webhook-configuration", "tally", "--webhook-secret", "tally-webhook-tls"}, nil
}
