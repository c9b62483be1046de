package variables

import (
	"reflect"
	"testing"
)

// queryCase is one expression with its expected result or failure.
type queryCase struct {
	expr    string
	want    any
	wantErr bool
}

func runQueries(t *testing.T, tests map[string]queryCase) {
	t.Helper()
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := Query(tc.expr, doc)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("%s = %#v, want an error", tc.expr, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("%s: %v", tc.expr, err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("%s = %#v, want %#v", tc.expr, got, tc.want)
			}
		})
	}
}

func TestStringFunctions(t *testing.T) {
	runQueries(t, map[string]queryCase{
		"compare orders strings":                {expr: "compare('a', 'b')", want: float64(-1)},
		"compare of equal strings":              {expr: "compare('a', 'a')", want: float64(0)},
		"equal_fold ignores case":               {expr: "equal_fold('pizza', 'pIzZa')", want: true},
		"equal_fold of different strings":       {expr: "equal_fold('pizza', 'APPLE')", want: false},
		"replace the first n":                   {expr: "replace('Lorem ipsum dolor ipsum bar ipsum', 'ipsum', 'muspi', `2`)", want: "Lorem muspi dolor muspi bar ipsum"},
		"replace all with -1":                   {expr: "replace('a-a-a', 'a', 'b', `-1`)", want: "b-b-b"},
		"replace with a fractional count fails": {expr: "replace('a', 'a', 'b', `1.5`)", wantErr: true},
		"replace_all":                           {expr: "replace_all('a-b-c', '-', '.')", want: "a.b.c"},
		"to_upper":                              {expr: "to_upper('abc')", want: "ABC"},
		"to_lower":                              {expr: "to_lower('ABC')", want: "abc"},
		"trim strips a cutset":                  {expr: "trim('¡¡¡Hello, Gophers!!!', '!¡')", want: "Hello, Gophers"},
		"trim leaves inner characters":          {expr: "trim('foocorpcom', 'o')", want: "foocorpcom"},
		"trim several characters":               {expr: "trim('foocorpcom', 'mcof')", want: "rp"},
		"trim_prefix":                           {expr: "trim_prefix('docker://kubevirt/fedora', 'docker://')", want: "kubevirt/fedora"},
		"split":                                 {expr: "split('cat,dog,horse', ',')", want: []any{"cat", "dog", "horse"}},
		"truncate":                              {expr: "truncate('foobar', `3`)", want: "foo"},
		"truncate longer than the string":       {expr: "truncate('foo', `12`)", want: "foo"},
		"truncate keeps whole characters":       {expr: "truncate('héllo', `2`)", want: "hé"},
		"truncate to a negative length":         {expr: "truncate('foo', `-1`)", want: ""},
		"path_canonicalize":                     {expr: "path_canonicalize('/var//lib///kubelet')", want: "/var/lib/kubelet"},
		"path_canonicalize with dots":           {expr: "path_canonicalize('/var/run/../run/./containerd.sock')", want: "/var/run/containerd.sock"},
		"to_boolean":                            {expr: "to_boolean('FalsE')", want: false},
		"to_boolean of something else fails":    {expr: "to_boolean('yes')", wantErr: true},
		"a string function on a number fails":   {expr: "to_upper(`1`)", wantErr: true},
	})
}

func TestMatchingFunctions(t *testing.T) {
	runQueries(t, map[string]queryCase{
		"regex_match a string":                      {expr: "regex_match('^[1-7]$', '1')", want: true},
		"regex_match a number":                      {expr: "regex_match('^[1-7]$', `1`)", want: true},
		"regex_match no match":                      {expr: "regex_match('^nginx$', 'nginx:1.2')", want: false},
		"regex_match with a bad expression fails":   {expr: "regex_match('(', 'x')", wantErr: true},
		"regex_replace_all with groups":             {expr: "regex_replace_all('([0-9])([0-9])', 'hello im 42 months old', '${1}1')", want: "hello im 41 months old"},
		"regex_replace_all of numbers":              {expr: "regex_replace_all('2', `42`, `7`)", want: "47"},
		"regex_replace_all_literal":                 {expr: "regex_replace_all_literal('^(\\d{3}-?\\d{2}-?\\d{4})$', '123-45-6789', 'redacted')", want: "redacted"},
		"regex_replace_all_literal keeps $ as text": {expr: "regex_replace_all_literal('a', 'abc', '$1')", want: "$1bc"},
		"pattern_match with wildcards":              {expr: "pattern_match('158-7?-4*', '158-73-417')", want: true},
		"pattern_match a number":                    {expr: "pattern_match('1*', `10`)", want: true},
		"pattern_match no match":                    {expr: "pattern_match('nginx', 'busybox')", want: false},
		"label_match a subset":                      {expr: "label_match(`{\"dog\":\"lab\"}`, `{\"dog\":\"lab\",\"color\":\"tan\"}`)", want: true},
		"label_match a different value":             {expr: "label_match(`{\"color\":\"tan\"}`, `{\"color\":\"black\"}`)", want: false},
		"label_match a missing label":               {expr: "label_match(`{\"a\":\"\"}`, `{}`)", want: false},
		"label_match from the data":                 {expr: "label_match(`{\"app\":\"shop\"}`, request.object.metadata.labels)", want: true},
	})
}

func TestEncodingFunctions(t *testing.T) {
	runQueries(t, map[string]queryCase{
		"base64_encode":                  {expr: "base64_encode('hello')", want: "aGVsbG8="},
		"base64_decode":                  {expr: "base64_decode('aGVsbG8=')", want: "hello"},
		"base64_decode of bad data":      {expr: "base64_decode('%%%')", wantErr: true},
		"sha256":                         {expr: "sha256('alertmanager-kube-prometheus-stack-alertmanager')", want: "75c07bb807f2d80a85d34880b8af0c5f29f7c27577076ed5d0e4b427dee7dbcc"},
		"md5":                            {expr: "md5('fis')", want: "37ab815c056b5c5f600f6ac93e486a78"},
		"parse_json":                     {expr: "parse_json('{\"a\":[1]}').a[0]", want: float64(1)},
		"parse_json of a list":           {expr: "parse_json('[\"1001\",\"1002\"]')[*].to_number(@)", want: []any{float64(1001), float64(1002)}},
		"parse_json of bad data":         {expr: "parse_json('{')", wantErr: true},
		"parse_yaml":                     {expr: "parse_yaml('species:\n  isGoodBoi: false\n  height: 15').species", want: map[string]any{"isGoodBoi": false, "height": float64(15)}},
		"parse_yaml of bad data":         {expr: "parse_yaml('a: [')", wantErr: true},
		"x509_decode of garbage fails":   {expr: "x509_decode('not a certificate')", wantErr: true},
		"image_normalize a short name":   {expr: "image_normalize('nginx')", want: "docker.io/nginx:latest"},
		"image_normalize keeps a tag":    {expr: "image_normalize('ghcr.io/org/app:v1')", want: "ghcr.io/org/app:v1"},
		"image_normalize a digest":       {expr: "image_normalize('nginx@sha256:abc')", want: "docker.io/nginx@sha256:abc"},
		"image_normalize a port":         {expr: "image_normalize('localhost:5000/app')", want: "localhost:5000/app:latest"},
		"image_normalize a Hub path":     {expr: "image_normalize('library/nginx:1.2')", want: "docker.io/library/nginx:1.2"},
		"image_normalize garbage fails":  {expr: "image_normalize('a b')", wantErr: true},
		"is_external_url a public host":  {expr: "is_external_url('https://example.com/x')", want: true},
		"is_external_url a service":      {expr: "is_external_url('http://svc.ns.svc.cluster.local')", want: false},
		"is_external_url a private IP":   {expr: "is_external_url('http://10.0.0.1:8080')", want: false},
		"is_external_url a public IP":    {expr: "is_external_url('http://8.8.8.8')", want: true},
		"is_external_url localhost":      {expr: "is_external_url('http://localhost')", want: false},
		"is_external_url not a URL":      {expr: "is_external_url('::')", want: false},
		"random has the pattern's shape": {expr: "regex_match('^[a-z0-9]{6}$', random('[a-z0-9]{6}'))", want: true},
		"random with alternatives":       {expr: "regex_match('^(ab|cd)-[0-9]+$', random('(ab|cd)-[0-9]+'))", want: true},
		"random of a bad pattern fails":  {expr: "random('[')", wantErr: true},
		"random of a huge pattern fails": {expr: "random('a{1000}b{1000}c{1000}d{1000}e{1000}')", wantErr: true},
	})
}

func TestCollectionFunctions(t *testing.T) {
	runQueries(t, map[string]queryCase{
		"lookup a key":                  {expr: "lookup(`{\"key1\": \"value1\", \"key2\": \"value2\"}`, 'key2')", want: "value2"},
		"lookup an index":               {expr: "lookup(`[\"item0\", \"item1\"]`, `1`)", want: "item1"},
		"lookup a missing key is null":  {expr: "lookup(`{}`, 'x')", want: nil},
		"lookup out of range is null":   {expr: "lookup(`[1]`, `5`)", want: nil},
		"lookup a fractional index":     {expr: "lookup(`[1]`, `0.5`)", wantErr: true},
		"lookup an object by number":    {expr: "lookup(`{}`, `1`)", wantErr: true},
		"lookup a dynamic key":          {expr: "lookup(request.object.metadata, join('', ['na', 'me']))", want: "web"},
		"items of an object":            {expr: "items(`{\"team\":\"apple\",\"organization\":\"banana\"}`, 'key', 'value')", want: []any{map[string]any{"key": "organization", "value": "banana"}, map[string]any{"key": "team", "value": "apple"}}},
		"items of an array":             {expr: "items(`[\"a\"]`, 'i', 'v')", want: []any{map[string]any{"i": float64(0), "v": "a"}}},
		"items with one argument":       {expr: "items(`{\"a\":1}`)", want: []any{[]any{"a", float64(1)}}},
		"object_from_lists":             {expr: "object_from_lists(['a', 'b'], [`1`])", want: map[string]any{"a": float64(1), "b": nil}},
		"object_from_lists bad keys":    {expr: "object_from_lists([`1`], [`1`])", wantErr: true},
		"contains on a projection":      {expr: "contains(request.object.spec.containers[].name, 'b')", want: true},
		"standard functions still work": {expr: "request.object.metadata.keys(@) | length(@)", want: float64(3)},
		"int64 data in a filter":        {expr: "request.object.spec.containers[?ports[?containerPort > `79`]].name", want: []any{"a"}},
		"int64 data in a function":      {expr: "max(request.object.spec.containers[].ports[].containerPort)", want: float64(80)},
		"an unknown function fails":     {expr: "no_such_function('x')", wantErr: true},
	})
}

func TestFunctionNamesListsTheDocumentedSet(t *testing.T) {
	have := map[string]bool{}
	for _, n := range FunctionNames() {
		have[n] = true
	}
	for _, n := range []string{"compare", "equal_fold", "replace", "replace_all", "to_upper", "to_lower", "trim", "trim_prefix",
		"split", "regex_replace_all", "regex_replace_all_literal", "regex_match", "pattern_match", "label_match", "add", "sum",
		"subtract", "multiply", "divide", "modulo", "round", "base64_decode", "base64_encode", "time_since", "time_now",
		"time_now_utc", "time_add", "time_parse", "time_to_cron", "time_utc", "time_diff", "time_before", "time_after",
		"time_between", "time_truncate", "path_canonicalize", "truncate", "semver_compare", "parse_json", "parse_yaml", "lookup",
		"items", "object_from_lists", "random", "x509_decode", "image_normalize", "is_external_url", "sha256", "md5", "to_boolean"} {
		if !have[n] {
			t.Errorf("function %s is missing", n)
		}
	}
}
