#!/usr/bin/env bash
# Makes a Docker engine available to make e2e-kind, and takes down what it
# started.
#
#   hack/kind/docker.sh up     a running engine is used as it is; with none,
#                              Debian's docker.io is installed when dockerd is
#                              absent (root only) and dockerd is started
#   hack/kind/docker.sh down   stops the dockerd that "up" started, if any
#
# The engine "up" starts runs containers through hack/kind/runc-capfilter:
# some sandboxes (these CI machines) start every process without
# CAP_SYS_RESOURCE, and a privileged container (a kind node) then fails in runc
# with "unable to apply caps: operation not permitted" (../shared/KIND.md).
# On a machine with all capabilities the filter changes nothing.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache_root=${TALLY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tally}
state="$cache_root/kind/dockerd"
pidfile="$state/dockerd.pid"
# The label of e2e/kind.ImportImage's images (e2e/kind/image.go: imageLabel).
e2e_image_label=dev.tally.e2e-image=true

say() { echo "docker.sh: $*" >&2; }
fail() { echo "docker.sh: $*" >&2; exit 1; }

engine_runs() { docker info >/dev/null 2>&1; }

install_engine() {
	command -v dockerd >/dev/null && return 0
	[[ $(id -u) == 0 ]] || fail "no Docker engine runs and dockerd is not installed; install Docker (or run as root so this script can install Debian's docker.io)"
	command -v apt-get >/dev/null || fail "no Docker engine runs, dockerd is not installed and this is not a Debian-like system (no apt-get); install Docker"
	say "installing Debian's docker.io, containerd, runc, iptables (apt-get)..."
	apt-get update -qq >"$state/apt.log" 2>&1 || fail "apt-get update failed; see $state/apt.log"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io containerd runc iptables >>"$state/apt.log" 2>&1 ||
		fail "apt-get install docker.io failed; see $state/apt.log"
}

up() {
	command -v docker >/dev/null || fail "no docker CLI; install Docker"
	if engine_runs; then
		return 0
	fi
	mkdir -p "$state"
	install_engine
	[[ $(id -u) == 0 ]] || fail "no Docker engine runs and starting dockerd needs root"
	# The OCI runtime wrapper, built from this repository.
	CGO_ENABLED=0 go -C "$repo" build -o "$state/runc-capfilter" ./hack/kind/runc-capfilter
	local runc
	runc=$(command -v runc) || fail "runc is not installed"
	say "starting dockerd (log: $state/dockerd.log)"
	TALLY_REAL_RUNC=$runc nohup dockerd \
		--pidfile "$pidfile" \
		--add-runtime "tally-runc=$state/runc-capfilter" \
		--default-runtime tally-runc \
		>"$state/dockerd.log" 2>&1 &
	for _ in $(seq 1 60); do
		engine_runs && { say "dockerd is up"; return 0; }
		sleep 0.5
	done
	tail -20 "$state/dockerd.log" >&2 || true
	fail "dockerd did not answer within 30 s; see $state/dockerd.log"
}

down() {
	# The images the kind runs import (e2e/kind.ImportImage) are labelled; a
	# later run's import takes their tag and leaves the old one dangling:
	# those are removed here, when no run uses them any more.
	if engine_runs; then
		docker image prune --force --filter "label=$e2e_image_label" >/dev/null ||
			say "could not remove the dangling images of earlier runs"
	fi
	[[ -f $pidfile ]] || return 0
	local pid
	pid=$(cat "$pidfile")
	if kill -0 "$pid" 2>/dev/null; then
		say "stopping the dockerd it started (pid $pid)"
		kill "$pid"
		for _ in $(seq 1 60); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.5
		done
	fi
	rm -f "$pidfile"
}

case ${1:-} in
up) up ;;
down) down ;;
*) fail "usage: $0 up|down" ;;
esac
