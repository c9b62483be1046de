package scan

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tally-dev/tally/controllers/watch"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"

	"github.com/tally-dev/tally/engine/match"
)

// resolveKinds maps match kinds to the GVRs to list: every group that serves
// the kind when no group is given, its preferred version. Wildcard kinds and
// subresources are not scanned in the background.
func (s *Scanner) resolveKinds(kinds []string) ([]schema.GroupVersionResource, error) {
	var out []schema.GroupVersionResource
	var errs []error
	for _, k := range kinds {
		ref, err := match.ParseKind(k)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ref.Subresource != "" {
			continue // subresources exist only at admission
		}
		if strings.ContainsAny(ref.Kind, "*?") {
			errs = append(errs, fmt.Errorf("kind %q: wildcard kinds are not scanned in the background", k))
			continue
		}
		gvrs, err := s.lookupKind(ref)
		if err != nil {
			errs = append(errs, fmt.Errorf("kind %q: %w", k, err))
			continue
		}
		out = append(out, gvrs...)
	}
	return out, errors.Join(errs...)
}

func (s *Scanner) lookupKind(ref match.KindSelector) ([]schema.GroupVersionResource, error) {
	for attempt := 0; attempt < 2; attempt++ {
		lists, err := s.disc.ServerPreferredResources()
		if err != nil && len(lists) == 0 {
			return nil, fmt.Errorf("discovery: %w", err)
		}
		var out []schema.GroupVersionResource
		for _, list := range lists {
			gv, err := schema.ParseGroupVersion(list.GroupVersion)
			if err != nil {
				continue
			}
			if (ref.Group != "*" && gv.Group != ref.Group) || (ref.Version != "*" && gv.Version != ref.Version) {
				continue
			}
			for _, r := range list.APIResources {
				if r.Kind == ref.Kind && !strings.Contains(r.Name, "/") && hasVerbs(r, "list", "watch") {
					out = append(out, gv.WithResource(r.Name))
				}
			}
		}
		if len(out) > 0 {
			return out, nil
		}
		if c, ok := s.disc.(discovery.CachedDiscoveryInterface); ok && attempt == 0 {
			c.Invalidate() // a CRD may have appeared since discovery was cached
			continue
		}
		break
	}
	return nil, fmt.Errorf("not served by the API server")
}

func hasVerbs(r metav1.APIResource, verbs ...string) bool {
	for _, v := range verbs {
		found := false
		for _, have := range r.Verbs {
			if have == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// ensureKinds records that a policy needs exactly gvrs, starting sources for
// kinds that gain their first user and stopping those that lose their last.
func (s *Scanner) ensureKinds(policy string, gvrs []schema.GroupVersionResource) {
	want := map[schema.GroupVersionResource]bool{}
	for _, g := range gvrs {
		want[g] = true
	}
	s.mu.Lock()
	var start, stop []schema.GroupVersionResource
	for g, users := range s.kindUsers {
		if users[policy] && !want[g] {
			delete(users, policy)
			if len(users) == 0 {
				delete(s.kindUsers, g)
				stop = append(stop, g)
			}
		}
	}
	for g := range want {
		users := s.kindUsers[g]
		if users == nil {
			users = map[string]bool{}
			s.kindUsers[g] = users
			start = append(start, g)
		}
		users[policy] = true
	}
	ctx := s.ctx
	s.mu.Unlock()

	for _, g := range start {
		if g == GVRNamespace {
			// Always watched for labels; its objects are stored as resources
			// only while a policy needs them, so list them again now.
			s.mu.Lock()
			old := s.sources[g]
			s.sources[g] = watch.Start(ctx, s.client, g, s)
			s.mu.Unlock()
			if old != nil {
				old.Stop()
			}
			continue
		}
		if err := s.canList(g); err != nil {
			s.log().Error(err, "a kind the policies need cannot be read", "gvr", g.String())
			s.metrics.kindErrors.WithLabelValues(g.String()).Inc()
			s.mu.Lock()
			if tp := s.policies[policy]; tp != nil && s.opts.Recorder != nil {
				s.opts.Recorder.Eventf(tp.object, "Warning", "KindForbidden", "tally cannot list %s: %v", g.String(), err)
			}
			s.mu.Unlock()
			continue
		}
		src := watch.Start(ctx, s.client, g, s)
		s.mu.Lock()
		s.sources[g] = src
		s.mu.Unlock()
	}
	for _, g := range stop {
		if g != GVRNamespace { // the namespace watch stays: labels are always needed
			s.mu.Lock()
			src := s.sources[g]
			delete(s.sources, g)
			delete(s.synced, g)
			s.mu.Unlock()
			if src == nil {
				continue
			}
			src.Stop()
		}
		group, kind := s.groupKind(g)
		stale, _ := s.store.Read().ResourcesOfKind(group, kind, "")
		for _, r := range stale {
			s.forgetResource(r.UID)
		}
	}
}

// canList probes a kind with a one-item LIST, so that a kind the service
// account may not read is reported instead of retried forever.
func (s *Scanner) canList(gvr schema.GroupVersionResource) error {
	s.mu.Lock()
	ctx := s.ctx
	s.mu.Unlock()
	_, err := s.client.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("forbidden: grant get, list and watch on %s to tally's service account: %w", gvr.String(), err)
	}
	return nil // other errors are transient: the reflector retries them with backoff
}

func (s *Scanner) kindNeeded(gvr schema.GroupVersionResource) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.kindUsers[gvr]) > 0
}

// rememberKind records the group and kind a GVR serves, learnt from its objects.
func (s *Scanner) rememberKind(gvr schema.GroupVersionResource, group, kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kindOf == nil {
		s.kindOf = map[schema.GroupVersionResource]string{}
		s.gvrOf = map[string]schema.GroupVersionResource{}
	}
	if _, ok := s.kindOf[gvr]; !ok {
		s.kindOf[gvr] = kind
		s.gvrOf[group+"/"+kind] = gvr
	}
}

func (s *Scanner) groupKind(gvr schema.GroupVersionResource) (group, kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return gvr.Group, s.kindOf[gvr]
}

func (s *Scanner) gvrFor(group, kind string) schema.GroupVersionResource {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gvrOf[group+"/"+kind]
}
