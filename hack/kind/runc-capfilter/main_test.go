package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestSubcommandFindsTheSpecOfEachForm(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		command string
		flag    string
		value   string
	}{
		{[]string{"--root", "/run/x", "--log", "l.json", "create", "--bundle", "/b", "id"}, "create", "--bundle", "/b"},
		{[]string{"--log-format", "json", "run", "-b=/b2", "id"}, "run", "-b", "/b2"},
		{[]string{"exec", "--process", "/p.json", "--detach", "id"}, "exec", "--process", "/p.json"},
		{[]string{"--systemd-cgroup", "start", "id"}, "start", "", ""},
	} {
		command, flags := subcommand(tc.args)
		if command != tc.command || (tc.flag != "" && flags[tc.flag] != tc.value) {
			t.Errorf("subcommand(%q) = %q %v, want %q with %s=%s", tc.args, command, flags, tc.command, tc.flag, tc.value)
		}
	}
}

func TestRewriteDropsOnlyTheMissingCapabilities(t *testing.T) {
	dir := t.TempDir()
	spec := `{"ociVersion":"1.0.2","process":{"args":["/sbin/init"],"capabilities":{` +
		`"bounding":["CAP_CHOWN","CAP_SYS_RESOURCE","CAP_SYS_ADMIN"],` +
		`"effective":["CAP_SYS_RESOURCE"],"permitted":["CAP_CHOWN","CAP_SYS_RESOURCE"]}},"hostname":"node"}`
	path := filepath.Join(dir, "config.json")
	if err := os.WriteFile(path, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := rewrite(path, map[string]bool{"CAP_SYS_RESOURCE": true}, true); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		OCIVersion string `json:"ociVersion"`
		Hostname   string `json:"hostname"`
		Process    struct {
			Args         []string            `json:"args"`
			Capabilities map[string][]string `json:"capabilities"`
		} `json:"process"`
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"bounding": {"CAP_CHOWN", "CAP_SYS_ADMIN"}, "effective": {}, "permitted": {"CAP_CHOWN"}}
	if !reflect.DeepEqual(got.Process.Capabilities, want) {
		t.Errorf("capabilities = %v, want %v", got.Process.Capabilities, want)
	}
	if got.OCIVersion != "1.0.2" || got.Hostname != "node" || len(got.Process.Args) != 1 {
		t.Errorf("the rest of the spec changed: %s", raw)
	}

	// An exec process file has the capabilities at its top.
	process := filepath.Join(dir, "process.json")
	if err := os.WriteFile(process, []byte(`{"args":["sh"],"capabilities":{"bounding":["CAP_SYS_RESOURCE","CAP_KILL"]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := rewrite(process, map[string]bool{"CAP_SYS_RESOURCE": true}, false); err != nil {
		t.Fatal(err)
	}
	raw, _ = os.ReadFile(process)
	var p struct {
		Capabilities map[string][]string `json:"capabilities"`
	}
	if err := json.Unmarshal(raw, &p); err != nil || !reflect.DeepEqual(p.Capabilities["bounding"], []string{"CAP_KILL"}) {
		t.Errorf("process file = %s (%v)", raw, err)
	}
}

func TestRewriteLeavesAFullSpecUntouched(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.json")
	spec := `{"process":{"capabilities":{"bounding":["CAP_CHOWN"]}},  "spacing":"kept"}`
	if err := os.WriteFile(path, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := rewrite(path, map[string]bool{"CAP_SYS_RESOURCE": true}, true); err != nil {
		t.Fatal(err)
	}
	if raw, _ := os.ReadFile(path); string(raw) != spec {
		t.Errorf("spec rewritten though nothing was dropped: %s", raw)
	}
}
