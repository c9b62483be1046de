// Package harness starts the clusters the conformance suite runs on in
// tests and CI: the local control plane of e2e/cluster with tally's
// processes (Local), and kind (e2e/kind). Only the suite's test and the
// hack tools import it: the shipped `tally conformance` runs the same cases
// against a cluster given by its kubeconfig (conformance.Deployed) and
// does not link the test harness (envtest, e2e-framework's kind support).
package harness
