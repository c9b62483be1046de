#!/usr/bin/env bash
# Builds the PostgreSQL image reports-server's kind runs use, from Debian's
# packages (debootstrap, as hack/kind/node-image.sh builds its images): no
# registry is reached. The image's entrypoint (postgres/entrypoint) makes the
# database at the first start and runs the server.
#
#   hack/thirdparty/postgres-image.sh IMAGE
#
# Cached under ~/.cache/tally/thirdparty (TALLY_CACHE_DIR), keyed by the
# Debian suite and this folder's files: a warm run loads the saved image (or
# finds it in Docker). Cold: ~2 minutes (debootstrap).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${TALLY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tally}
debian_suite=bookworm
debian_mirror=${TALLY_DEBIAN_MIRROR:-http://deb.debian.org/debian}
packages=postgresql,ca-certificates

image=${1:?usage: $0 IMAGE}
key=$(
	{
		echo "$debian_suite $packages"
		sha256sum "$0" "$here/postgres/entrypoint" | cut -d' ' -f1
	} | sha256sum | cut -c1-12
)
cache="$cache_root/thirdparty"
saved="$cache/postgres-$debian_suite-$key.tar.gz"
built="tally.local/postgresql-built:$key"
step() { echo "postgres-image: $*" >&2; }
gz() { if command -v pigz >/dev/null; then pigz "$@"; else gzip "$@"; fi; }

if ! docker image inspect "$built" >/dev/null 2>&1; then
	if [[ -f $saved ]]; then
		step "loading the cached image ($saved)"
		gz -dc "$saved" | docker load >&2
	else
		mkdir -p "$cache"
		work=$(mktemp -d "${TMPDIR:-/tmp}/tally-postgres-image.XXXXXX")
		trap 'rm -rf "$work"' EXIT
		command -v debootstrap >/dev/null || {
			[[ $(id -u) == 0 ]] || { echo "postgres-image: debootstrap is not installed" >&2; exit 1; }
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >&2
		}
		step "debootstrap $debian_suite ($packages)"
		debootstrap --variant=minbase --include="$packages" "$debian_suite" "$work/rootfs" "$debian_mirror" >"$work/debootstrap.log" 2>&1 ||
			{ tail -20 "$work/debootstrap.log" >&2; exit 1; }
		# The package's own cluster, package lists and archives are not needed.
		rm -rf "$work/rootfs"/var/cache/apt/archives/*.deb "$work/rootfs"/var/lib/apt/lists/* "$work/rootfs"/var/lib/postgresql/*
		install -m 0755 "$here/postgres/entrypoint" "$work/rootfs/usr/local/bin/postgres-entrypoint"
		tar -C "$work/rootfs" -c . | docker import \
			--change 'ENTRYPOINT ["/usr/local/bin/postgres-entrypoint"]' \
			--change 'ENV PGDATA=/var/lib/postgresql/data' \
			- "$built" >/dev/null
		docker save "$built" | gz -1 >"$saved.tmp"
		mv "$saved.tmp" "$saved"
		find "$cache" -maxdepth 1 -name 'postgres-*.tar.gz' ! -name "$(basename "$saved")" -delete
	fi
fi
docker tag "$built" "$image"
echo "$image"
