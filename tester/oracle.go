package tester

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/tally-dev/tally/engine"
)

// OracleFileName is the corpus file holding what Kyverno's CLI printed for
// every policy x resource pair of every test folder (`kyverno apply
// --policy-report`): results and messages.
const OracleFileName = "ORACLE.jsonl"

// OracleEntry is one line of ORACLE.jsonl.
type OracleEntry struct {
	Suite    string `json:"suite"`
	Test     string `json:"test"`
	Tier     string `json:"tier"`
	Policy   string `json:"policy"`
	Rule     string `json:"rule"`
	Resource string `json:"resource"` // Kind/namespace/name
	Result   string `json:"result"`
	Message  string `json:"message"`
	// expected, of tally's own results: the test's expectation when the
	// rule reads apiCall entries and the test's values give every one of
	// them (valuesGiveCalls): `kyverno test` then never calls the API,
	// while `kyverno apply`, which wrote ORACLE.jsonl, called it anyway
	// (and failed, or read the objects it was given).
	valuesGiveCalls bool
	expected        string
}

// OracleDiff is one (policy, rule, resource) where tally and Kyverno differ.
// An empty Want* means Kyverno gave no result; an empty Got* that tally gave none.
type OracleDiff struct {
	Test, Policy, Rule, Resource string
	WantResult, GotResult        string
	WantMessage, GotMessage      string
}

// OracleCounts compares tally's results with Kyverno's over a set of keys: the
// union of the (policy, rule, resource) triples either of them reported.
type OracleCounts struct {
	Keys      int // results of either side
	Results   int // same result on both sides
	Messages  int // same result and same message
	Different int // a result on both sides, not the same
	Missing   int // Kyverno's results tally did not give
	Extra     int // tally's results Kyverno did not give
	// ValuesApplied are the keys compared with the test's expectation
	// rather than with `kyverno apply`'s answer: the rule's apiCall data is
	// given by the test's values, as `kyverno test` applies them
	// (OracleEntry.expected). Their messages count as the same when the
	// result is: the test names no message.
	ValuesApplied int
}

// ResultRate is the share of keys with the same result.
func (c OracleCounts) ResultRate() float64 { return rate(c.Results, c.Keys) }

// MessageRate is the share of keys with the same result and message.
func (c OracleCounts) MessageRate() float64 { return rate(c.Messages, c.Keys) }

func rate(n, of int) float64 {
	if of == 0 {
		return 0
	}
	return float64(n) / float64(of)
}

func (c OracleCounts) String() string {
	return fmt.Sprintf("%d same result, %d different, %d missing, %d extra; %d same message (of %d: %.2f%% same result, %.2f%% same message; %d compared with the test's expectation, the values giving their apiCall data)",
		c.Results, c.Different, c.Missing, c.Extra, c.Messages, c.Keys, 100*c.ResultRate(), 100*c.MessageRate(), c.ValuesApplied)
}

// OracleReport is tally's agreement with ORACLE.jsonl, per tier.
type OracleReport struct {
	Tiers map[string]*OracleCounts
	Diffs []OracleDiff
}

// CompareOracle runs every test folder of the given tiers of the corpus
// the way `kyverno apply` ran them for ORACLE.jsonl (every policy against
// every resource, with the folder's values, user and exceptions) and compares
// tally's results and messages with Kyverno's.
func CompareOracle(ctx context.Context, corpus string, tiers ...string) (*OracleReport, error) {
	entries, err := ReadOracle(filepath.Join(corpus, OracleFileName))
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, t := range tiers {
		want[t] = true
	}
	type folder struct{ suite, test, tier string }
	byFolder := map[folder][]OracleEntry{}
	for _, e := range entries {
		if want[e.Tier] {
			f := folder{e.Suite, e.Test, e.Tier}
			byFolder[f] = append(byFolder[f], e)
		}
	}
	folders := make([]folder, 0, len(byFolder))
	for f := range byFolder {
		folders = append(folders, f)
	}
	sort.Slice(folders, func(i, j int) bool {
		return folders[i].suite+"/"+folders[i].test < folders[j].suite+"/"+folders[j].test
	})
	rep := &OracleReport{Tiers: map[string]*OracleCounts{}}
	for _, t := range tiers {
		rep.Tiers[t] = &OracleCounts{}
	}
	for _, f := range folders {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		got, err := applyFolder(ctx, filepath.Join(corpus, f.suite, f.test, TestFileName))
		if err != nil {
			return rep, err
		}
		counts := rep.Tiers[f.tier]
		seen := map[string]bool{}
		for _, e := range byFolder[f] {
			key := oracleKey(e.Policy, e.Rule, e.Resource)
			if seen[key] {
				continue
			}
			seen[key] = true
			g := got[key]
			counts.Keys++
			if g.valuesGiveCalls && g.expected != "" {
				// As `kyverno test` answers: the values give the data.
				counts.ValuesApplied++
				e.Result, e.Message = g.expected, g.Message
			}
			d := OracleDiff{Test: f.suite + "/" + f.test, Policy: e.Policy, Rule: e.Rule, Resource: e.Resource,
				WantResult: e.Result, WantMessage: e.Message, GotResult: g.Result, GotMessage: g.Message}
			switch {
			case g.Result == "":
				counts.Missing++
				rep.Diffs = append(rep.Diffs, d)
			case g.Result != e.Result:
				counts.Different++
				rep.Diffs = append(rep.Diffs, d)
			case g.Message != e.Message:
				counts.Results++
				rep.Diffs = append(rep.Diffs, d)
			default:
				counts.Results++
				counts.Messages++
			}
		}
		extra := make([]string, 0, len(got))
		for key := range got {
			if !seen[key] {
				extra = append(extra, key)
			}
		}
		sort.Strings(extra)
		for _, key := range extra {
			g := got[key]
			counts.Keys++
			counts.Extra++
			rep.Diffs = append(rep.Diffs, OracleDiff{Test: f.suite + "/" + f.test, Policy: g.Policy, Rule: g.Rule,
				Resource: g.Resource, GotResult: g.Result, GotMessage: g.Message})
		}
	}
	return rep, nil
}

// ReadOracle reads ORACLE.jsonl.
func ReadOracle(file string) ([]OracleEntry, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []OracleEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var e OracleEntry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", file, line, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return out, nil
}

// oracleKey identifies a result. Kyverno's CLI puts a namespaced resource
// without a namespace in "default" and a cluster-scoped one in "": both are
// read as "" here, since tally does not know which kinds are namespaced.
func oracleKey(policy, rule, resource string) string {
	kind, rest, _ := strings.Cut(resource, "/")
	ns, name, _ := strings.Cut(rest, "/")
	if ns == "default" {
		ns = ""
	}
	return policy + "\x00" + rule + "\x00" + kind + "/" + ns + "/" + name
}

// applyFolder evaluates every policy of a test file against every resource,
// as `kyverno apply` does, keyed by oracleKey.
func applyFolder(ctx context.Context, file string) (map[string]OracleEntry, error) {
	docs, err := ReadDocuments(file)
	if err != nil {
		return nil, err
	}
	out := map[string]OracleEntry{}
	for _, d := range docs {
		t, err := testOf(file, d)
		if err != nil {
			return nil, err
		}
		// The test's expectations, by policy, rule and resource name, read
		// off the file (not evaluated again).
		expected := map[string]string{}
		for _, r := range t.Results {
			for _, name := range append(slices.Clone(r.Resources), r.Resource) {
				if name != "" {
					name = name[strings.LastIndex(name, "/")+1:]
					expected[r.Policy+"\x00"+r.Rule+"\x00"+name] = cmp.Or(r.Result, r.Status)
				}
			}
		}
		l, _ := load(file, t) // what could not be read simply yields no results, as for Kyverno
		for _, lp := range l.policies {
			if lp.Policy == nil {
				continue
			}
			for _, r := range l.resources {
				kind, _ := r.obj["kind"].(string)
				resource := kind + "/" + r.namespace + "/" + r.name
				vs := &valueSource{spec: l.test.Values, resource: r.name}
				for _, rr := range l.evaluate(ctx, lp, r, "") {
					out[oracleKey(rr.Policy, rr.Rule, resource)] = OracleEntry{
						Policy: rr.Policy, Rule: rr.Rule, Resource: resource,
						Result: string(rr.Result), Message: rr.Message,
						valuesGiveCalls: valuesGiveCalls(lp.Policy, rr.Rule, vs, lp.Name),
						expected:        expectedOf(expected, rr.Policy, rr.Rule, r.name),
					}
				}
			}
		}
	}
	return out, nil
}

// expectedOf is the test's expectation of a result; an expectation of a
// rule stands for the rules autogen derives from it, as in Kyverno's CLI.
func expectedOf(expected map[string]string, policy, rule, resource string) string {
	if e, ok := expected[policy+"\x00"+rule+"\x00"+resource]; ok {
		return e
	}
	base := strings.TrimPrefix(strings.TrimPrefix(rule, "autogen-cronjob-"), "autogen-")
	return expected[policy+"\x00"+base+"\x00"+resource]
}

// valuesGiveCalls says whether a rule reads apiCall context entries and the
// test's values give every one of them (for the rule, or the resource).
func valuesGiveCalls(p *engine.Policy, rule string, vs *valueSource, policy string) bool {
	given := map[string]bool{}
	for k := range vs.policyValues(policy) {
		root, _, _ := strings.Cut(k, ".")
		given[root] = true
	}
	for k := range vs.RuleValues(policy, rule) {
		root, _, _ := strings.Cut(k, ".")
		given[root] = true
	}
	calls := 0
	for _, r := range p.Rules {
		if r.Name != rule {
			continue
		}
		entries := r.Raw.Context
		if v := r.Raw.Validate; v != nil {
			for _, fe := range v.ForEach { // a foreach's entries, loaded per element
				entries = append(slices.Clone(entries), fe.Context...)
			}
		}
		for _, c := range entries {
			if c.APICall == nil {
				continue
			}
			calls++
			if !given[c.Name] {
				return false
			}
		}
	}
	return calls > 0
}
