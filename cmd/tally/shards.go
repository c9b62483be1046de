package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"

	"github.com/tally-dev/tally/api/apiresources"
	"github.com/tally-dev/tally/controllers/shard"
)

type shardsOptions struct {
	kubeconfig, namespace, group, output string
}

// shardMember is one scanner pair as `tally shards` shows it.
type shardMember struct {
	Identity   string    `json:"identity"`
	Live       bool      `json:"live"`
	RenewedAgo string    `json:"renewedAgo"`
	Renewed    time.Time `json:"renewed"`
	Namespaces []string  `json:"namespaces"`
	// Cluster says this member owns the cluster-scoped resources.
	Cluster bool `json:"clusterScoped"`
}

func newShardsCommand(clk clock.PassiveClock) *cobra.Command {
	var o shardsOptions
	cmd := &cobra.Command{
		Use:   "shards [NAMESPACE...]",
		Short: "Show which scanner pair owns which namespaces",
		Long: `Read the membership Leases of tally's scanner pairs (tally-scanner --sharding,
the Helm chart's scanner.replicas) and the cluster's namespaces, and show each
live member with the namespaces it scans and whose reports its merger writes;
with NAMESPACE arguments, the owner of each.

A member is live while its Lease's renew time plus its duration is ahead of
this machine's clock (the members themselves judge by the renewals they
observe, so a skewed clock here can show a member live or dead a little
early).`,
		Example: `  tally shards
  tally shards -o json
  tally shards prod payments`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := runShards(cmd.Context(), cmd.OutOrStdout(), o, args, clk.Now()); err != nil {
				return exitError{code: exitCouldNotRun, msg: err.Error()}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
	f.StringVar(&o.namespace, "tally-namespace", "tally-system", "the namespace tally runs in (of its Leases)")
	f.StringVar(&o.group, "group", "tally-scanner", "the scanner pairs' group (tally-scanner --shard-group)")
	f.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	return cmd
}

func runShards(ctx context.Context, w io.Writer, o shardsOptions, owners []string, now time.Time) error {
	if o.output != "table" && o.output != "json" {
		return fmt.Errorf("unknown --output %q (want table or json)", o.output)
	}
	client, err := newDynamicClient(o.kubeconfig)
	if err != nil {
		return err
	}
	list, err := client.Resource(apiresources.Lease).Namespace(o.namespace).List(ctx, metav1.ListOptions{LabelSelector: shard.LabelMember + "=" + o.group})
	if err != nil {
		return fmt.Errorf("list the membership Leases in %s: %w", o.namespace, err)
	}
	byID := map[string]*shardMember{}
	var live []string
	for i := range list.Items {
		var l coordinationv1.Lease
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &l); err != nil {
			continue
		}
		id, dur, ok := shard.MemberLease(&l, shard.DefaultLeaseDuration)
		if !ok {
			continue // the members ignore it too
		}
		m := &shardMember{Identity: id}
		if l.Spec.RenewTime != nil {
			m.Renewed = l.Spec.RenewTime.Time
			m.RenewedAgo = now.Sub(m.Renewed).Round(time.Second).String()
			m.Live = now.Before(m.Renewed.Add(dur))
		}
		byID[m.Identity] = m
		if m.Live {
			live = append(live, m.Identity)
		}
	}
	if len(byID) == 0 {
		return fmt.Errorf("no membership Lease of group %s in %s: tally-scanner runs without --sharding there (one replica leads), or not at all", o.group, o.namespace)
	}
	slices.Sort(live)
	if len(owners) > 0 {
		for _, ns := range owners {
			owner := shard.Owner(live, ns)
			if owner == "" {
				owner = "(no live member)"
			}
			fmt.Fprintf(w, "%s\t%s\n", ns, owner)
		}
		return nil
	}
	nsList, err := client.Resource(apiresources.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list namespaces: %w", err)
	}
	for _, ns := range nsList.Items {
		if m := byID[shard.Owner(live, ns.GetName())]; m != nil {
			m.Namespaces = append(m.Namespaces, ns.GetName())
		}
	}
	if m := byID[shard.Owner(live, "")]; m != nil {
		m.Cluster = true
	}
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	members := make([]*shardMember, 0, len(ids))
	for _, id := range ids {
		slices.Sort(byID[id].Namespaces)
		members = append(members, byID[id])
	}
	if o.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(members)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MEMBER\tLIVE\tRENEWED\tCLUSTER-SCOPED\tNAMESPACES")
	for _, m := range members {
		names := strings.Join(m.Namespaces, ",")
		if len(m.Namespaces) > 6 {
			names = strings.Join(m.Namespaces[:6], ",") + fmt.Sprintf(",... (%d)", len(m.Namespaces))
		}
		fmt.Fprintf(tw, "%s\t%v\t%s ago\t%v\t%s\n", m.Identity, m.Live, m.RenewedAgo, m.Cluster, names)
	}
	return tw.Flush()
}
