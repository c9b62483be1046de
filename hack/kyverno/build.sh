#!/usr/bin/env bash
# Builds Kyverno (the version pinned below) from the Go module proxy: its
# admission controller (cmd/kyverno), background controller, reports
# controller and CLI (kubectl-kyverno), the tests' reference (issue 55).
# The module is downloaded with `go mod download` into the module cache,
# copied out (the cache is read-only) and built with its own go.mod;
# nothing of it is committed here. Prints the folder of the build:
# bin/<command> (static linux binaries) and src/ (the module: its CRDs
# under src/config/crds, its chart under src/charts).
#
#   hack/kyverno/build.sh                  all four commands
#   hack/kyverno/build.sh kyverno cli      some of them (kyverno,
#                                          background-controller,
#                                          reports-controller, cli)
#
# Cached under ~/.cache/tally/kyverno (TALLY_CACHE_DIR), keyed by the
# version, this script and the Go version: a warm run builds nothing. A
# command already built is not built again.
set -euo pipefail

version=v1.19.0
module=github.com/kyverno/kyverno
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${TALLY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tally}

fail() { echo "kyverno/build.sh: $*" >&2; exit 1; }

commands=("$@")
[[ ${#commands[@]} -gt 0 ]] || commands=(kyverno background-controller reports-controller cli)
package_of() {
	case $1 in
	kyverno) echo ./cmd/kyverno ;;
	background-controller) echo ./cmd/background-controller ;;
	reports-controller) echo ./cmd/reports-controller ;;
	cli) echo ./cmd/cli/kubectl-kyverno ;;
	*) fail "unknown command $1 (kyverno, background-controller, reports-controller, cli)" ;;
	esac
}

key=$(
	{
		echo "$module@$version"
		sha256sum "$0" | cut -d' ' -f1
		go env GOVERSION GOARCH
	} | sha256sum | cut -c1-12
)
out="$cache_root/kyverno/$version-$key"
mkdir -p "$out/bin"

if [[ ! -f $out/src/go.mod ]]; then
	echo "kyverno/build.sh: downloading $module@$version" >&2
	dir=$(GOFLAGS=-mod=mod GOWORK=off go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[[ -n $dir && -f $dir/go.mod ]] || fail "go mod download $module@$version gave no module folder"
	rm -rf "$out/.src" && cp -r "$dir" "$out/.src" && chmod -R u+w "$out/.src" && mv "$out/.src" "$out/src"
fi

# The version stamped, as Kyverno's Makefile stamps it.
ldflags="-s -w -X $module/pkg/version.BuildVersion=$version"
export GOWORK=off GOFLAGS=-mod=mod GOOS=linux CGO_ENABLED=0
for name in "${commands[@]}"; do
	pkg=$(package_of "$name")
	[[ -x $out/bin/$name ]] && continue
	echo "kyverno/build.sh: building $name ($version; log: $out/$name.build.log)" >&2
	start=$SECONDS
	(cd "$out/src" && go build -trimpath -ldflags "$ldflags" -o "$out/bin/.$name.tmp" "$pkg") >"$out/$name.build.log" 2>&1 ||
		{ tail -30 "$out/$name.build.log" >&2; fail "go build of $name failed"; }
	mv "$out/bin/.$name.tmp" "$out/bin/$name"
	echo "kyverno/build.sh: $name built in $((SECONDS - start)) s" >&2
done
echo "$out"
