// Package e2e holds tally's integration tests against a real cluster: the
// local control plane of package cluster (what `make test` and CI run), or
// the cluster named by E2E_KUBECONFIG.
package e2e
