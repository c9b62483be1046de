#!/usr/bin/env bash
# Builds Kubernetes commands from their Go modules (this folder's go.mod) into
# a cache outside the clone, keyed by version, and prints the folder that
# holds them. With no arguments it builds what the integration tests run
# (kube-apiserver, etcd, kube-controller-manager: what KUBEBUILDER_ASSETS
# expects); hack/kind/node-image.sh names the node's commands as well.
# A command already in the cache is not built again; a cold build of the
# default three takes ~12 minutes on 2 cores, kubelet ~6 minutes more.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
k8s_version=v1.35.4
etcd_version=v3.6.5
cache_root=${TALLY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tally}
# The key covers the versions and this module's go.sum, so a change of pins rebuilds.
key="${k8s_version}-etcd${etcd_version}-$(sha256sum "$here/go.sum" | cut -c1-12)"
out="$cache_root/controlplane/$key"

commands=("$@")
[[ ${#commands[@]} -gt 0 ]] || commands=(kube-apiserver etcd kube-controller-manager)

ver_pkg=k8s.io/component-base/version
minor=${k8s_version#v1.}; minor=${minor%%.*}
ldflags="-s -w -X $ver_pkg.gitVersion=$k8s_version -X $ver_pkg.gitMajor=1 -X $ver_pkg.gitMinor=$minor -X $ver_pkg.gitTreeState=clean"

package_of() {
	case $1 in
	etcd) echo go.etcd.io/etcd/server/v3 ;;
	kube-apiserver | kube-controller-manager | kube-scheduler | kube-proxy | kubelet | kubeadm | kubectl)
		echo "k8s.io/kubernetes/cmd/$1" ;;
	*) echo "build.sh: unknown command $1" >&2; return 1 ;;
	esac
}

mkdir -p "$out"
for name in "${commands[@]}"; do
	pkg=$(package_of "$name")
	[[ -x "$out/$name" ]] && continue
	echo "building $name ($k8s_version)..." >&2
	# Built beside its final name and moved, so an interrupted build leaves no half binary.
	CGO_ENABLED=0 go -C "$here" build -trimpath -ldflags "$ldflags" -o "$out/.$name.tmp" "$pkg" >&2
	mv "$out/.$name.tmp" "$out/$name"
done
echo "$out"
