package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/tally-dev/tally/report"
)

// resourceOutput writes what apply's mutate and generate rules produce, as
// Kyverno's CLI does: without -o on standard output, each after the line
// "policy NAME applied to NS/KIND/NAME:"; with -o PATH to that file when
// PATH ends in .yaml or .yml (emptied first), else into that folder, one
// file per resource ("NAME-mutated.yaml") and per generating policy
// ("POLICY-generated.yaml").
type resourceOutput struct {
	stdout io.Writer
	path   string
	dir    bool
}

// newResourceOutput readies -o PATH: the file (and its folder) or the
// folder is created, a file emptied.
func newResourceOutput(stdout io.Writer, path string) (*resourceOutput, error) {
	o := &resourceOutput{stdout: stdout, path: filepath.Clean(path)}
	if path == "" {
		o.path = ""
		return o, nil
	}
	ext := strings.ToLower(filepath.Ext(o.path))
	o.dir = ext != ".yaml" && ext != ".yml"
	if o.dir {
		if err := os.MkdirAll(o.path, 0o750); err != nil {
			return nil, fmt.Errorf("-o %s: %w", path, err)
		}
		return o, nil
	}
	if err := os.MkdirAll(filepath.Dir(o.path), 0o750); err != nil {
		return nil, fmt.Errorf("-o %s: %w", path, err)
	}
	if err := os.WriteFile(o.path, nil, 0o600); err != nil {
		return nil, fmt.Errorf("-o %s: %w", path, err)
	}
	return o, nil
}

// mutated writes a resource as a policy's mutate rules left it.
func (o *resourceOutput) mutated(policy string, trigger, obj map[string]any) error {
	if err := o.write(policy, trigger, obj, report.SubjectOf(trigger).Name+"-mutated"); err != nil {
		return err
	}
	if o.path == "" {
		fmt.Fprint(o.stdout, "\n\nMutation:\nMutation has been applied successfully.")
	}
	return nil
}

// generated writes a resource a policy's generate rules would create for a
// trigger.
func (o *resourceOutput) generated(policy string, trigger, obj map[string]any) error {
	if err := o.write(policy, trigger, obj, policyFileName(policy)+"-generated"); err != nil {
		return err
	}
	if o.path == "" {
		fmt.Fprint(o.stdout, "\n\nGenerate:\nGeneration completed successfully.")
	}
	return nil
}

func policyFileName(policy string) string {
	return strings.ReplaceAll(policy, "/", "-")
}

func (o *resourceOutput) write(policy string, trigger, obj map[string]any, file string) error {
	doc, err := yaml.Marshal(obj)
	if err != nil {
		return err
	}
	if o.path == "" {
		s := report.SubjectOf(trigger)
		fmt.Fprintf(o.stdout, "\npolicy %s applied to %s/%s/%s:", policy, s.Namespace, s.Kind, s.Name)
		fmt.Fprint(o.stdout, "\n"+string(doc)+"\n---\n")
		return nil
	}
	target := o.path
	if o.dir {
		target = filepath.Join(o.path, file+".yaml")
	}
	f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(doc, []byte("\n---\n\n")...))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
