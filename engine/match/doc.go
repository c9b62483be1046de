// Package match decides which resources a Kyverno rule applies to (its
// match and exclude blocks) and derives the rules Kyverno generates for Pod
// controllers (autogen). It is pure: no client, no I/O.
//
// # Matching
//
// Compile turns a rule's match and exclude into a Matcher; Matches is the
// one-shot form. A resource is selected when the match holds and the
// exclude does not.
//
// A match or exclude holds one of three forms, tried in this order: `any`
// (one filter suffices), `all` (every filter must hold), or the legacy
// filter written inline. Within a filter every criterion that is set must
// hold ("AND across fields, OR within a list"):
//
//   - kinds: see ParseKind for the forms ("Pod", "v1/Pod", "apps/v1/Deployment",
//     "apps/*/Deployment", "*", "Pod/status", "Deployment.scale", "*/*"). A kind
//     without subresource selects the resource itself only, except that Pod
//     also selects pods/ephemeralcontainers; "*" selects every kind but no
//     subresource, "*/*" everything. Matching is case-sensitive.
//   - name (deprecated) and names: wildcards `*` and `?`; a resource without
//     a name yet is matched by its generateName.
//   - namespaces: wildcards; a Namespace is matched by its own name, another
//     cluster-scoped resource has the namespace "" (only "*" selects it).
//   - annotations: every entry must match an annotation of the resource, key
//     and value both accepting wildcards.
//   - selector: a label selector; matchLabels keys and values accept
//     wildcards, an entry holding one matches when some label matches both.
//   - namespaceSelector: the same against the labels of the resource's
//     namespace (none when unknown or cluster-scoped); never holds for a
//     Namespace.
//   - operations: the request's operation; a background scan is a CREATE. An
//     empty list selects every operation (the webhook registration, not the
//     match, is what limits validate rules to some operations in Kyverno).
//   - roles, clusterRoles, subjects: the requesting user (see below).
//
// A filter that sets nothing holds for nothing: an empty match selects
// nothing, an empty exclude excludes nothing.
//
// # User criteria without a user
//
// A background scan has no request user (adm == nil), and neither has an
// Admission with no username, groups or roles. In that case, as in Kyverno,
// a match filter ignores its user criteria (only its resource criteria
// count, and a filter left with none selects nothing), while an exclude
// filter that sets user criteria does not hold, so nothing is excluded for an
// unknown user. Policies with background: true and user criteria are invalid
// anyway (docs/reporting-rules.md, R06); this only fixes what matching does if asked.
// Subjects: a User matches the username, a Group one of the groups, a
// ServiceAccount the "system:serviceaccount:<ns>:<name>" username; names
// accept wildcards. Roles ("ns:name") and clusterRoles match exactly.
//
// A namespaced Policy applies only to resources of its own namespace:
// InPolicyNamespace, checked before matching.
//
// # Autogen
//
// Autogen reproduces Kyverno's rules for Pod controllers:
//
//   - Policy-wide: autogen is off for the whole policy when any rule has a
//     generate body or a mutate using patchesJson6902, or when any match or
//     exclude filter of any rule sets name, names, selector or annotations,
//     or lists Pod with other kinds; it is on when some filter names Pod or
//     a Pod controller. The annotation pod-policies.kyverno.io/autogen-controllers
//     then chooses the controllers: absent, all of them (DaemonSet,
//     Deployment, Job, ReplicaSet, ReplicationController, StatefulSet and
//     CronJob); "none", none; otherwise the listed kinds, custom kinds
//     embedding a Pod template (e.g. CloneSet) included.
//   - Per rule: a validate rule (pattern, anyPattern, deny, foreach,
//     podSecurity or cel) whose match names Pod and whose exclude names no
//     kind or names Pod gets "autogen-<name>" for the controllers other than
//     CronJob, then "autogen-cronjob-<name>" for CronJob; names are cut at 63
//     characters. Generated rules follow the policy's rules, in rule order;
//     rules already named autogen-* are replaced by the generated ones.
//   - Rewriting: the kinds of the filters naming Pod become the controller
//     kinds (every filter's for the CronJob rule), other criteria stay.
//     pattern and each anyPattern entry move whole (metadata included) under
//     spec.template (spec.jobTemplate.spec.template for CronJob). Every
//     JMESPath reference request.object.spec / request.object.metadata (and
//     oldObject) anywhere in the rule (context, preconditions, deny
//     conditions, foreach lists, messages) gains the same prefix, and so do
//     object.spec / object.metadata in validate.cel. A quoted
//     request."object".metadata is left alone, as documented by Kyverno.
//     podSecurity is kept as written (its evaluator extracts the Pod spec).
//
// Where tally departs from Kyverno on purpose: custom controller kinds are
// kept next to standard ones (Kyverno drops them, kyverno#7446) and CronJob
// never lands in the "autogen-" rule; generated rules keep celPreconditions,
// skipBackgroundRequests and reportProperties (Kyverno loses them, which
// widens the rule); mutate and verifyImages rules get no generated rules (tally
// does not evaluate them); `$(...)` message references are not shifted; the
// variable rewrite is bounded to whole path segments (Kyverno replaces raw
// substrings).
package match
