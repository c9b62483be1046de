package memstore

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// renderSchema prints every table and index with the properties that matter
// in review: uniqueness, missing values, and the indexer.
func renderSchema() string {
	var b strings.Builder
	s := schema()
	tables := make([]string, 0, len(s.Tables))
	for name := range s.Tables {
		tables = append(tables, name)
	}
	sort.Strings(tables)
	for _, name := range tables {
		t := s.Tables[name]
		fmt.Fprintf(&b, "table %s\n", name)
		indexes := make([]string, 0, len(t.Indexes))
		for n := range t.Indexes {
			indexes = append(indexes, n)
		}
		sort.Strings(indexes)
		for _, n := range indexes {
			ix := t.Indexes[n]
			fmt.Fprintf(&b, "  index %-22s unique=%-5v allowMissing=%-5v indexer=%T\n", n, ix.Unique, ix.AllowMissing, ix.Indexer)
		}
	}
	return b.String()
}

func TestSchemaGolden(t *testing.T) {
	if err := schema().Validate(); err != nil {
		t.Fatalf("schema invalid: %v", err)
	}
	golden := filepath.Join("testdata", t.Name(), "schema.golden")
	got := renderSchema()
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("schema changed; review and run with -update:\n got:\n%s\nwant:\n%s", got, want)
	}
}
