# tally: build, test, generate, lint, and a local cluster.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go
BIN := bin
KIND_CLUSTER ?= tally
CLUSTER_DIR ?= $(CURDIR)/.cluster
# The release version: the image tag, and the chart's appVersion (which
# `make chart-version VERSION=...` sets).
VERSION ?= $(shell awk '/^appVersion:/ {gsub(/"/, "", $$2); print $$2}' charts/tally/Chart.yaml)
IMAGE ?= ghcr.io/tally-dev/tally

.PHONY: all help build image chart-version test test-unit fuzz fuzz-short generate verify-generate lint lint-chart controlplane cluster-up cluster-down e2e-kind bench clean

all: build

## help: this list
help:
	@awk '/^## / {sub(/^## /, ""); split($$0, a, ": "); printf "  %-16s %s\n", a[1], substr($$0, length(a[1]) + 3)}' $(MAKEFILE_LIST)

# The version stamped into the binaries (`tally version`); see internal/version.
LDFLAGS := -X github.com/tally-dev/tally/internal/version.Version=$(VERSION)

## build: the three binaries into ./bin, stamped with VERSION
build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/ ./cmd/...

# The openreports.io API (tally-merger --report-api openreports): its CRDs are
# generated from the upstream Go types, pinned in go.mod.
OPENREPORTS_API := github.com/openreports/reports-api/apis/openreports.io/v1alpha1

## generate: deepcopy functions and CRD manifests (controller-gen, pinned in go.mod)
generate:
	$(GO) tool controller-gen object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(GO) tool controller-gen crd:allowDangerousTypes=false paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(GO) tool controller-gen crd:allowDangerousTypes=false paths=$(OPENREPORTS_API) output:crd:artifacts:config=config/crd/bases
	@# The Helm chart reads the same RBAC and CRDs as config/ (copies, checked fresh by verify-generate).
	rm -rf charts/tally/files && mkdir -p charts/tally/files/rbac charts/tally/files/crd
	cp config/rbac/service_accounts.yaml config/rbac/scanner_resources.yaml config/rbac/scanner_cluster_role.yaml \
	   config/rbac/scanner_role.yaml config/rbac/merger_cluster_role.yaml charts/tally/files/rbac/
	cp config/webhook/rbac.yaml charts/tally/files/rbac/webhook.yaml
	cp config/rbac/ingest-kyverno-reports/cluster_role.yaml charts/tally/files/rbac/ingest_kyverno_reports.yaml
	cp config/rbac/tenants/aggregate_roles.yaml charts/tally/files/rbac/tenant_roles.yaml
	cp config/components/pod-image-pull-secrets/cluster_role.yaml charts/tally/files/rbac/pod_pull_secrets.yaml
	cp config/crd/bases/*.yaml charts/tally/files/crd/

## verify-generate: fail if the generated files are stale
verify-generate: generate
	@git diff --exit-code -- api config/crd charts/tally/files || { echo "generated files are stale: run 'make generate' and commit" >&2; exit 1; }
	@test -z "$$(git status --porcelain -- api config/crd charts/tally/files)" || { echo "untracked generated files: run 'make generate' and commit" >&2; git status --porcelain -- api config/crd charts/tally/files >&2; exit 1; }

## image: the container image, tagged $(IMAGE):$(VERSION) (needs Docker)
image:
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE):$(VERSION) .

## chart-version: set the chart's version and appVersion, and the kustomize Deployment's image tags (scanner and merger, one Pod), to VERSION
chart-version:
	sed -i -E 's/^version: .*/version: $(patsubst v%,%,$(VERSION))/; s/^appVersion: .*/appVersion: "$(VERSION)"/' charts/tally/Chart.yaml
	sed -i -E 's|(image: ghcr.io/tally-dev/tally:).*|\1$(VERSION)|' config/scanner/deployment.yaml

## lint-chart: helm lint of charts/tally in both modes (helm pinned in go.mod; e2e's TestHelmChart renders it and dry-runs every object on the API server)
lint-chart:
	$(GO) tool helm lint --strict charts/tally
	$(GO) tool helm lint --strict charts/tally --set mode=besideKyverno

## lint: gofmt, go vet, and go.mod tidy
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run 'go mod tidy' and commit" >&2; exit 1; }

## controlplane: build (or reuse from the cache) kube-apiserver, etcd, kube-controller-manager
controlplane:
	@bash hack/controlplane/build.sh

## test: everything CI runs, its stages side by side as their inputs are ready (TEST_JOBS at once; each stage's output is printed whole when it ends, then a table of the stages' times): generated files fresh, lint, a short run of every fuzz target; unit and integration tests on a real API server (Kyverno's own CLI, built by hack/kyverno/build.sh cli, judging tally's engine on random resources); the conformance suite again with tally beside the real Kyverno 1.19 (its admission and background controllers built from the Go module proxy by hack/kyverno/build.sh, cached, run as processes); the reference comparison (one scenario beside the real Kyverno, once with Kyverno's reports controller and once with tally, the final reports compared result by result); the suite with three scanner pairs sharding the namespaces (and the shard fault cases); its matrix and lifecycle cases with OpenReports; its report cases beside the real Kyverno with reports-server storing the reports (and Kyverno's EphemeralReports); its forged-review cases with the webhook's client authentication off; the whole suite on kind with reports-server and policy-reporter, and, on a second kind cluster at the same time, the report cases on reports-server's PostgreSQL in OpenReports
test:
	@rm -rf $(STAGE_DIR) && mkdir -p $(STAGE_DIR) && date +%s >$(STAGE_DIR)/start
	@trap 'bash hack/kind/docker.sh down' EXIT; rc=0; \
	$(MAKE) --no-print-directory -k -j$(TEST_JOBS) test-stages || rc=$$?; \
	STAGE_DIR=$(STAGE_DIR) bash hack/stage.sh summary; exit $$rc

# The stages of make test, and what each waits for: whatever compiles tally's
# tree waits for the generated files to be checked (make generate rewrites
# them). Builds that only the kind stages need run at a lower priority (nice),
# beside the tests on the local control plane, which mostly wait; the stages
# on the local control plane run in two chains beside the unit and
# integration tests. Times: CONTRIBUTING.md, "What make test needs and does".
STAGE_DIR ?= $(CURDIR)/$(BIN)/stages
TEST_JOBS ?= 8
STAGE = STAGE_DIR=$(STAGE_DIR) bash hack/stage.sh run
CONTROLPLANE = TALLY_CONTROLPLANE_ASSETS=$$(bash hack/controlplane/build.sh)
LATER = nice -n 5

.PHONY: test-stages stage-generate stage-checks stage-controlplane stage-kyverno stage-docker stage-node-image stage-reports-server-build stage-policy-reporter-build stage-postgres-image stage-unit stage-beside-kyverno stage-reference stage-sharded stage-openreports stage-reports-server stage-forged stage-kind stage-kind-postgres

test-stages: stage-checks stage-unit stage-beside-kyverno stage-reference stage-sharded stage-openreports stage-reports-server stage-forged stage-kind stage-kind-postgres

stage-generate:
	@$(STAGE) generate $(MAKE) --no-print-directory verify-generate
stage-checks: stage-generate
	@$(STAGE) checks $(MAKE) --no-print-directory -j1 lint lint-chart fuzz-short
stage-controlplane:
	@$(STAGE) build-controlplane bash hack/controlplane/build.sh
stage-kyverno: stage-controlplane
	@$(STAGE) build-kyverno bash hack/kyverno/build.sh
stage-docker: stage-generate
	@$(STAGE) docker bash hack/kind/docker.sh up
stage-node-image: stage-docker stage-controlplane
	@$(STAGE) build-node-image $(LATER) bash hack/kind/node-image.sh
stage-reports-server-build:
	@$(STAGE) build-reports-server $(LATER) bash hack/thirdparty/build.sh reports-server
stage-policy-reporter-build: stage-reports-server-build
	@$(STAGE) build-policy-reporter $(LATER) bash hack/thirdparty/build.sh policy-reporter
stage-postgres-image: stage-docker
	@$(STAGE) build-postgres-image $(LATER) bash hack/thirdparty/postgres-image.sh tally.local/postgresql:e2e
stage-unit: stage-generate stage-controlplane stage-kyverno
	@$(STAGE) unit-integration env TALLY_KYVERNO_CLI=$$(bash hack/kyverno/build.sh cli)/bin/cli $(CONTROLPLANE) $(GO) test -count=1 -timeout 60m ./...
stage-beside-kyverno: stage-generate stage-controlplane stage-kyverno
	@$(STAGE) beside-kyverno env $(CONTROLPLANE) TALLY_CONFORMANCE_PROVIDER=local-kyverno $(GO) test -count=1 -timeout 40m ./conformance/
stage-reference: stage-beside-kyverno
	@$(STAGE) reference env $(CONTROLPLANE) TALLY_REFERENCE_COMPARISON=1 $(GO) test -count=1 -timeout 30m ./conformance/reference/
stage-reports-server: stage-reference stage-reports-server-build
	@$(STAGE) reports-server env $(CONTROLPLANE) TALLY_CONFORMANCE_PROVIDER=local-kyverno TALLY_CONFORMANCE_REPORTS_SERVER=etcd $(GO) test -count=1 -timeout 20m ./conformance/ -run TestConformance -ginkgo.focus '$(REPORTS_SERVER_CASES)|$(BESIDE_REPORTS_SERVER_CASES)'
stage-forged: stage-reports-server
	@$(STAGE) forged env $(CONTROLPLANE) TALLY_CONFORMANCE_WEBHOOK_AUTH=off $(GO) test -count=1 -timeout 20m ./conformance/ -run TestConformance -ginkgo.focus '$(FORGED_CASES)'
stage-sharded: stage-generate stage-controlplane
	@$(STAGE) sharded env $(CONTROLPLANE) TALLY_CONFORMANCE_PROVIDER=local-sharded $(GO) test -count=1 -timeout 40m ./conformance/
stage-openreports: stage-sharded
	@$(STAGE) openreports env $(CONTROLPLANE) TALLY_CONFORMANCE_REPORT_API=openreports $(GO) test -count=1 -timeout 20m ./conformance/ -ginkgo.focus '$(OPENREPORTS_CASES)'
stage-kind: stage-node-image stage-reports-server-build stage-policy-reporter-build
	@$(STAGE) kind $(KIND_SUITE)
stage-kind-postgres: stage-node-image stage-reports-server-build stage-postgres-image
	@$(STAGE) kind-postgres $(KIND_POSTGRES_SUITE)

# The forged-review cases, run again with tally's webhook answering any
# caller (no client authentication): what docs/security.md says still holds.
FORGED_CASES := R20-forged-

# The matrix and lifecycle cases, run again with the final reports in the
# openreports.io API (tally-merger --report-api openreports).
OPENREPORTS_CASES := rules R(07|08|09|10|15|18|19)-

# Fuzz targets, as package:Target. A crash fails the run and leaves the
# input in the package's testdata/fuzz/<Target>/: fix it and commit the
# input as a regression seed (plain `go test` runs it).
FUZZ_TARGETS := \
	./engine:FuzzCheckPolicy \
	./engine:FuzzEvaluate \
	./engine:FuzzMutatingPolicy \
	./engine:FuzzParseAPIPath \
	./engine/cel:FuzzCompileEvaluate \
	./tester:FuzzLoadPolicies \
	./engine/pattern:FuzzValidate \
	./engine/pattern:FuzzMatchValue \
	./engine/conditions:FuzzEvaluate \
	./engine/variables:FuzzSubstitute \
	./engine/variables:FuzzQuery
FUZZTIME ?= 2m
# A count, not a duration: a -fuzztime duration races Go's fuzz coordinator
# (golang/go#75804, fixed in Go 1.27), which then fails a target with a bare
# "context deadline exceeded" and no crasher at the deadline.
FUZZ_SHORT_TIME ?= 1000x

# run-fuzz runs every target of FUZZ_TARGETS for $(1), one after the other.
define run-fuzz
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "fuzz: $$name ($$pkg) for $(1)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(1) -fuzzminimizetime 5s $$pkg || exit 1; \
	done
endef

## fuzz-short: every fuzz target for FUZZ_SHORT_TIME (default 1000 executions; part of make test)
fuzz-short:
	$(call run-fuzz,$(FUZZ_SHORT_TIME))

## fuzz: every fuzz target for FUZZTIME (default 2m each)
fuzz:
	$(call run-fuzz,$(FUZZTIME))

## bench: every go test benchmark of the hot paths, once each (BENCHTIME, default 1x; compare runs with benchstat); the scan and merge benches against a real API server are hack/scanbench and hack/mergebench, the whole pipeline hack/pipelinebench, one report object hack/writecost (docs/benchmarks.md)
BENCHTIME ?= 1x
bench:
	$(GO) test -run '^$$' -bench . -benchtime $(BENCHTIME) ./engine/... ./memstore/ ./report/ ./controllers/...

## test-unit: the tests that need no control plane
test-unit:
	$(GO) test -short ./...

## cluster-up: a local control plane for hand use; prints how to reach it
cluster-up:
	$(GO) build -o $(BIN)/cluster ./hack/cluster
	TALLY_CONTROLPLANE_ASSETS=$$(bash hack/controlplane/build.sh) $(BIN)/cluster up --dir $(CLUSTER_DIR)

## cluster-down: stop the local control plane started by cluster-up
cluster-down:
	$(GO) build -o $(BIN)/cluster ./hack/cluster
	$(BIN)/cluster down --dir $(CLUSTER_DIR)

## e2e-kind: the conformance suite on a kind cluster: a Docker engine (hack/kind/docker.sh installs and starts one when none runs, and stops it after), the node image built from packages and modules (hack/kind/node-image.sh, cached), tally's image from static binaries, the cluster of kind-config.yaml, reports-server storing the reports in its own etcd and policy-reporter reading them (both built from ../shared/third_party by hack/thirdparty/build.sh, cached), tally installed with its Helm chart; then the report cases again on a new cluster with reports-server on PostgreSQL and the reports in the OpenReports API; each cluster is deleted after (TALLY_KIND_KEEP=1 keeps it)
e2e-kind:
	@bash hack/kind/docker.sh up
	@trap 'bash hack/kind/docker.sh down' EXIT; \
	$(KIND_SUITE) && $(KIND_POSTGRES_SUITE)

# The two kind runs, of make e2e-kind and of make test's kind stages: the
# whole suite with reports-server on etcd; the report cases on a second
# cluster with reports-server on PostgreSQL and the reports in OpenReports.
KIND_SUITE = env TALLY_CONFORMANCE_PROVIDER=kind TALLY_KIND_CLUSTER=$(KIND_CLUSTER) TALLY_KIND_REPORTS_SERVER=etcd $(GO) test -v -count=1 -timeout 60m ./conformance/ -run TestConformance
KIND_POSTGRES_SUITE = env TALLY_CONFORMANCE_PROVIDER=kind TALLY_KIND_CLUSTER=$(KIND_CLUSTER)-postgres TALLY_KIND_REPORTS_SERVER=postgres TALLY_CONFORMANCE_REPORT_API=openreports $(GO) test -v -count=1 -timeout 30m ./conformance/ -run TestConformance -ginkgo.focus '$(REPORTS_SERVER_CASES)'

# Beside the real Kyverno with reports-server storing the reports and
# Kyverno's EphemeralReports (local control plane), the report cases and
# these: EphemeralReports folded and deleted, Kyverno's results kept.
BESIDE_REPORTS_SERVER_CASES := R20-intermediate|R45-

# The report cases, run on kind a second time with reports-server keeping
# the reports in PostgreSQL and tally writing them in the OpenReports API.
REPORTS_SERVER_CASES := R(07|08|09|10|14|15|16|18|19|48)-

clean:
	rm -rf $(BIN) $(CLUSTER_DIR)
