// Package tenant carries, through a context, the namespace of the
// namespaced policy (or PolicyException) whose evaluation is under way
// (R47). What reads the cluster for such an evaluation (the data loader,
// the image verifier's Secrets) reads it with that namespace's identity,
// never with tally's: the API server's RBAC draws the line
// (docs/security.md).
package tenant

import "context"

type key struct{}

// With marks ctx as the evaluation of a namespaced policy of namespace ns.
// An empty ns leaves ctx as it is (a cluster-wide policy: the platform's).
func With(ctx context.Context, ns string) context.Context {
	if ns == "" {
		return ctx
	}
	return context.WithValue(ctx, key{}, ns)
}

// Of is the namespace With marked ctx with: "" for the platform's policies.
func Of(ctx context.Context) string {
	s, _ := ctx.Value(key{}).(string)
	return s
}
