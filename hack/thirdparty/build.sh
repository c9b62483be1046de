#!/usr/bin/env bash
# Builds a client of tally's reports from its source snapshot in
# ../shared/third_party (TALLY_THIRD_PARTY): the snapshot is unpacked and
# compiled with its own go.mod (modules from the proxy), never copied into
# tally. Prints the folder of the build: bin/<name> (a static linux binary)
# and src/ (the unpacked source, with its Helm chart under src/charts).
#
#   hack/thirdparty/build.sh reports-server    kyverno/reports-server, CGO off
#   hack/thirdparty/build.sh policy-reporter   kyverno/policy-reporter, cgo
#                                              (sqlite) linked statically, as
#                                              its Dockerfile builds it
#
# The result is cached under ~/.cache/tally/thirdparty (TALLY_CACHE_DIR),
# keyed by the tarball, this script and the Go version: a warm run builds
# nothing. Cold, on 2 cores: reports-server ~6 minutes (about 2,000
# packages), policy-reporter ~4 minutes.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache_root=${TALLY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tally}
third_party=${TALLY_THIRD_PARTY:-$repo/../shared/third_party}

fail() { echo "thirdparty/build.sh: $*" >&2; exit 1; }

name=${1:-}
case $name in
reports-server) pattern='reports-server-*.tar.gz' ;;
policy-reporter) pattern='policy-reporter-*.tar.gz' ;;
*) fail "usage: $0 reports-server|policy-reporter" ;;
esac
[[ -d $third_party ]] || fail "no $third_party: the third-party source snapshots (../shared/third_party beside the clone, or TALLY_THIRD_PARTY)"
tarball=$(find "$third_party" -maxdepth 1 -name "$pattern" | sort | tail -1)
[[ -n $tarball ]] || fail "no $pattern in $third_party"

key=$(
	{
		sha256sum "$tarball" "$0" | cut -d' ' -f1
		go env GOVERSION GOARCH
	} | sha256sum | cut -c1-12
)
out="$cache_root/thirdparty/$name-$key"
if [[ -x $out/bin/$name ]]; then
	echo "$out"
	exit 0
fi

work=$(mktemp -d "$cache_root/thirdparty/.$name-XXXXXX" 2>/dev/null || { mkdir -p "$cache_root/thirdparty" && mktemp -d "$cache_root/thirdparty/.$name-XXXXXX"; })
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/src" "$work/bin"
tar -xzf "$tarball" -C "$work/src"
# git archive puts the tree under one folder named after the project.
src=$(find "$work/src" -mindepth 1 -maxdepth 1 -type d | head -1)
[[ -f $src/go.mod ]] || fail "$tarball holds no go.mod under one folder"

echo "thirdparty/build.sh: building $name from $(basename "$tarball") (log: $work/build.log)" >&2
start=$SECONDS
export GOWORK=off GOFLAGS= GOOS=linux
case $name in
reports-server)
	(cd "$src" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$work/bin/$name" .) >"$work/build.log" 2>&1 ||
		{ tail -30 "$work/build.log" >&2; fail "go build of $name failed"; }
	;;
policy-reporter)
	command -v gcc >/dev/null || fail "policy-reporter needs gcc (cgo, for sqlite)"
	(cd "$src" && CGO_ENABLED=1 go build -trimpath -tags sqlite_unlock_notify \
		-ldflags '-s -w -linkmode external -extldflags "-static"' -o "$work/bin/$name" .) >"$work/build.log" 2>&1 ||
		{ tail -30 "$work/build.log" >&2; fail "go build of $name failed"; }
	;;
esac
echo "thirdparty/build.sh: $name built in $((SECONDS - start)) s" >&2
rm -rf "$out"
mv "$src" "$work/source"
mkdir -p "$out"
mv "$work/bin" "$out/bin"
mv "$work/source" "$out/src"
echo "$out"
