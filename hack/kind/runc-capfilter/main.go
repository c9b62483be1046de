// Command runc-capfilter is an OCI runtime for dockerd that runs the real
// runc after removing, from the container's process spec, every capability
// this process's own bounding set lacks.
//
// Why: some sandboxes (the machines tally's CI runs on among them) start
// every process without CAP_SYS_RESOURCE. Docker asks for all capabilities
// for a --privileged container (a kind node), and runc fails with "unable to
// apply caps: operation not permitted". A capability the sandbox cannot grant
// is one the container could never use, so dropping it changes nothing else.
// On a machine whose bounding set is full the spec is left untouched.
//
// hack/kind/docker.sh registers it with dockerd (--add-runtime) when it starts
// an engine of its own. Usage is runc's: every argument is passed on.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// capNames lists the capabilities by number, as runtime specs name them.
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK",
	"CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE",
	"CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE",
	"CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG",
	"CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

func main() {
	real := os.Getenv("TALLY_REAL_RUNC")
	if real == "" {
		real = "/usr/sbin/runc"
	}
	if err := filterSpec(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "runc-capfilter: %v\n", err)
		os.Exit(1)
	}
	argv := append([]string{real}, os.Args[1:]...)
	if err := syscall.Exec(real, argv, os.Environ()); err != nil {
		fmt.Fprintf(os.Stderr, "runc-capfilter: exec %s: %v\n", real, err)
		os.Exit(1)
	}
}

// filterSpec finds the spec the runc command line names (the bundle's
// config.json for create and run, the --process file for exec) and drops the
// capabilities the bounding set lacks from it.
func filterSpec(args []string) error {
	missing, err := missingCapabilities()
	if err != nil || len(missing) == 0 {
		return err
	}
	command, flags := subcommand(args)
	switch command {
	case "create", "run":
		bundle := flags["--bundle"]
		if bundle == "" {
			bundle = flags["-b"]
		}
		if bundle == "" {
			bundle = "."
		}
		return rewrite(filepath.Join(bundle, "config.json"), missing, true)
	case "exec":
		process := flags["--process"]
		if process == "" {
			process = flags["-p"]
		}
		if process == "" {
			return nil // capabilities come from the container's spec, already filtered
		}
		return rewrite(process, missing, false)
	}
	return nil
}

// subcommand returns runc's subcommand and the values of the flags that
// follow it ("--flag value" and "--flag=value").
func subcommand(args []string) (string, map[string]string) {
	flags := map[string]string{}
	command := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		if command == "" {
			// Global flags with a value come before the subcommand.
			switch {
			case a == "--root" || a == "--log" || a == "--log-format" || a == "--criu" || a == "--rootless":
				i++
			case !strings.HasPrefix(a, "-"):
				command = a
			}
			continue
		}
		if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "-") {
			flags[k] = v
		} else if strings.HasPrefix(a, "-") && i+1 < len(args) {
			flags[a] = args[i+1]
		}
	}
	return command, flags
}

// missingCapabilities reads CapBnd from /proc/self/status and names the
// known capabilities it lacks.
func missingCapabilities() (map[string]bool, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		hex, ok := strings.CutPrefix(s.Text(), "CapBnd:")
		if !ok {
			continue
		}
		bits, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("reading CapBnd %q: %w", hex, err)
		}
		missing := map[string]bool{}
		for n, name := range capNames {
			if bits&(1<<n) == 0 {
				missing[name] = true
			}
		}
		return missing, nil
	}
	return nil, fmt.Errorf("no CapBnd line in /proc/self/status")
}

// rewrite drops the missing capabilities from the process's capability sets
// in the JSON file at path; inSpec says the process sits under "process" (a
// bundle's config.json) rather than at the top (an exec process file). The
// rest of the document is kept as it was.
func rewrite(path string, missing map[string]bool, inSpec bool) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	process := doc
	if inSpec {
		if doc["process"] == nil {
			return nil
		}
		if err := json.Unmarshal(doc["process"], &process); err != nil {
			return fmt.Errorf("%s: process: %w", path, err)
		}
	}
	if process["capabilities"] == nil {
		return nil
	}
	var sets map[string][]string
	if err := json.Unmarshal(process["capabilities"], &sets); err != nil {
		return fmt.Errorf("%s: capabilities: %w", path, err)
	}
	changed := false
	for name, caps := range sets {
		kept := caps[:0]
		for _, c := range caps {
			if missing[c] {
				changed = true
				continue
			}
			kept = append(kept, c)
		}
		sets[name] = kept
	}
	if !changed {
		return nil
	}
	if process["capabilities"], err = json.Marshal(sets); err != nil {
		return err
	}
	if inSpec {
		if doc["process"], err = json.Marshal(process); err != nil {
			return err
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o600)
}
