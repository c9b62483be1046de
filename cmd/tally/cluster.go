package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/controllers/data"
	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/match"
)

// clusterOptions are apply's --cluster flags, the Kyverno CLI's: evaluate
// the policies on the resources of a live cluster, and let them read the
// cluster's data.
type clusterOptions struct {
	cluster    bool
	kubeconfig string
	namespace  string
}

func (o *clusterOptions) addFlags(f *pflag.FlagSet) {
	f.BoolVar(&o.cluster, "cluster", false, "evaluate the resources of a live cluster (those the policies match), with the data policies read served by it")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default: $KUBECONFIG or ~/.kube/config)")
	f.StringVarP(&o.namespace, "namespace", "n", "", "with --cluster: only the resources of this namespace")
}

// liveCluster is a cluster apply reads from.
type liveCluster struct {
	dyn    dynamic.Interface
	disc   discovery.DiscoveryInterface
	loader *data.Loader
	stop   context.CancelFunc
	// nsLabels are the labels of every namespace, by name.
	nsLabels map[string]map[string]string
}

// connect opens the cluster of a kubeconfig and starts the data loader
// (stopped by close).
func (o clusterOptions) connect(ctx context.Context) (*liveCluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("--cluster: kubeconfig: %w", err)
	}
	cfg.UserAgent = "tally-cli"
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("--cluster: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("--cluster: %w", err)
	}
	c := &liveCluster{dyn: dyn, disc: cs.Discovery(), nsLabels: map[string]map[string]string{}}
	nss, err := dyn.Resource(apiresources.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("--cluster: listing namespaces: %w", err)
	}
	for _, ns := range nss.Items {
		c.nsLabels[ns.GetName()] = ns.GetLabels()
	}
	// A namespaced policy reads with the user's own rights, as the
	// platform's do: the CLI acts for whoever runs it.
	c.loader = data.New(dyn, cs.CoreV1().RESTClient(), data.Options{
		Tenants: &data.Own{Dynamic: dyn, REST: cs.CoreV1().RESTClient(), Kube: cs, User: "the CLI's user"}})
	runCtx, stop := context.WithCancel(ctx)
	c.stop = stop
	// The loader serves the policies' configMap and apiCall data; if it
	// stops early, say so: the results of policies reading that data may be
	// errors or stale.
	go func() {
		if err := c.loader.Run(runCtx); err != nil && runCtx.Err() == nil {
			fmt.Fprintf(os.Stderr, "tally: the cluster data loader stopped: %v\n", err)
		}
	}()
	return c, nil
}

func (c *liveCluster) close() { c.stop() }

// request fills in what the cluster gives a request: its data, and the
// labels of the resource's namespace.
func (c *liveCluster) request(req *engine.Request, namespace string) {
	req.Loader, req.Data = c.loader, c.loader
	if labels, ok := c.nsLabels[namespace]; ok && req.NamespaceLabels == nil {
		req.NamespaceLabels = labels
	}
}

// resources lists the objects of every resource the policies match (their
// preferred versions; subresources and wildcard kinds are not listed), in
// namespace when it is given (then cluster-scoped resources are left out).
func (c *liveCluster) resources(ctx context.Context, policies []*engine.Policy, namespace string) ([]map[string]any, error) {
	lists, err := c.disc.ServerPreferredResources()
	if err != nil && len(lists) == 0 {
		return nil, fmt.Errorf("--cluster: discovery: %w", err)
	}
	type served struct {
		gvr        schema.GroupVersionResource
		kind       string
		namespaced bool
	}
	var all []served
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") {
				continue
			}
			all = append(all, served{gvr: gv.WithResource(r.Name), kind: r.Kind, namespaced: r.Namespaced})
		}
	}
	wanted := map[schema.GroupVersionResource]bool{}
	var errs []error
	for _, p := range policies {
		for _, u := range p.Units() {
			for _, k := range u.Kinds {
				ref, err := match.ParseKind(k)
				if err != nil || ref.Subresource != "" && ref.Subresource != "*" || strings.ContainsAny(ref.Kind, "*?") {
					continue
				}
				for _, s := range all {
					if s.kind == ref.Kind && (ref.Group == "" || ref.Group == s.gvr.Group) && (ref.Version == "" || ref.Version == s.gvr.Version) {
						wanted[s.gvr] = true
					}
				}
			}
			for _, rr := range u.Resources {
				for _, s := range all {
					if anyOf(rr.Groups, s.gvr.Group) && anyOf(rr.Versions, s.gvr.Version) && anyOf(rr.Resources, s.gvr.Resource) {
						wanted[s.gvr] = true
					}
				}
			}
		}
	}
	var out []map[string]any
	for _, s := range all {
		if !wanted[s.gvr] || namespace != "" && !s.namespaced {
			continue
		}
		ri := c.dyn.Resource(s.gvr)
		var r dynamic.ResourceInterface = ri
		if namespace != "" {
			r = ri.Namespace(namespace)
		}
		list, err := r.List(ctx, metav1.ListOptions{})
		if err != nil {
			errs = append(errs, fmt.Errorf("--cluster: listing %s: %w", s.gvr, err))
			continue
		}
		for _, item := range list.Items {
			obj := item.Object
			if md, ok := obj["metadata"].(map[string]any); ok {
				delete(md, "managedFields")
			}
			out = append(out, obj)
		}
	}
	return out, errors.Join(errs...)
}

// anyOf reports whether a resource rule's list names v (or "*").
func anyOf(list []string, v string) bool {
	return slices.Contains(list, "*") || slices.Contains(list, v)
}
