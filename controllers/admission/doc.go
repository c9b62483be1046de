// Package admission is tally's admission bridge: an HTTPS validating webhook
// (AdmissionReview admission.k8s.io/v1, path /validate) that evaluates the
// compiled validate rules of every policy with admission enabled against the
// request, answers allowed or denied per the rules' failure actions, and
// records the results as AdmissionReports.
//
// Watches: ClusterPolicies, Policies, PolicyExceptions and Namespaces (its
// own reflectors, so the webhook works on every replica, not only the
// scanner's leader). (Beside Kyverno, the EphemeralReports of its admission
// controller are read by the merger itself: controllers/merge/fold.go.)
// Reads and writes, without watching: the Secret holding the generated serving certificate, and the
// ValidatingWebhookConfiguration whose caBundle (and rules) it keeps set.
//
// Writes: at most one AdmissionReport (namespaced resources) or
// ClusterAdmissionReport per resource, named by the resource UID, holding
// one section of results per content hash of the admitted object
// (sections.go). Results are aggregated per UID in memory and flushed in
// batches with a read-merge-write that keeps the newest result per (content
// hash, policy, rule), so that several replicas can serve the webhook at
// once. Queue key: resource UID.
package admission
