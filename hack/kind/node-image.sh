#!/usr/bin/env bash
# Builds tally's kind node image on this machine, from Debian's packages and
# Go modules only: no container registry is reached (none can be, on the
# machines tally's CI runs on). Prints the image's name.
#
#   hack/kind/node-image.sh
#
# The image is also tagged tally.local/kind-node:<Kubernetes version>, the
# name kind-config.yaml gives.
#
# The result is cached under ~/.cache/tally/kind (TALLY_CACHE_DIR), keyed by
# the versions below and the files of hack/kind/node: a warm run loads the
# saved image into Docker (or finds it there) and builds nothing. A cold run
# takes ~15 minutes on 2 cores, most of it compiling Kubernetes.
#
# What kind expects of a node image, and what this one has:
#   - systemd as PID 1, behind an entrypoint that prepares cgroups, mounts and
#     DNS (node/files/usr/local/bin/entrypoint);
#   - containerd and runc (Debian's), configured for the CRI with the systemd
#     cgroup driver (node/files/etc/containerd/config.toml);
#   - kubelet, kubeadm and kubectl on the PATH, a kubelet unit kubeadm can
#     drive, and /kind/version naming the Kubernetes version;
#   - every image "kubeadm config images list" names, already present: here
#     they are built FROM nothing but their static binaries (kube-proxy on a
#     minimal Debian, for iptables) and imported into containerd at boot;
#   - a CNI: kind's kindnet image cannot be had here, so the cluster is made
#     with disableDefaultCNI and the node carries the reference bridge plugin
#     with a one-node configuration.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
cache_root=${TALLY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tally}

k8s_version=$(sed -n 's/^k8s_version=//p' "$repo/hack/controlplane/build.sh")
debian_suite=bookworm
debian_mirror=${TALLY_DEBIAN_MIRROR:-http://deb.debian.org/debian}
coredns_version=v1.13.1  # what kubeadm $k8s_version names
cni_plugins_version=v1.9.0
crictl_version=v1.34.0
pause_tag=3.10.1         # what kubeadm $k8s_version names
# kubeadm names etcd 3.6.6-0; the module proxy serves no v3.6.6, so the image
# carries the etcd the integration tests run, under its own version, and
# kind-config.yaml points kubeadm at that tag.
etcd_tag=$(sed -n 's/^etcd_version=v//p' "$repo/hack/controlplane/build.sh")-0

node_packages=systemd,systemd-sysv,dbus,containerd,runc,iptables,nftables,conntrack,ethtool,socat,iproute2,kmod,ca-certificates,procps,util-linux,mount
proxy_packages=iptables,nftables,conntrack

key=$(
	{
		echo "$k8s_version $debian_suite $coredns_version $cni_plugins_version $crictl_version $pause_tag $etcd_tag"
		echo "$node_packages $proxy_packages"
		sha256sum "$repo/hack/controlplane/go.sum" "$0"
		(cd "$here" && find node pause -type f | sort | xargs sha256sum)
	} | sha256sum | cut -c1-12
)
image="tally.local/kind-node:${k8s_version}-${key}"
alias="tally.local/kind-node:${k8s_version}"
cache="$cache_root/kind"
saved="$cache/node-${k8s_version}-${key}.tar.gz"

step() { echo "node-image: $*" >&2; }
# pigz when the machine has it (Debian's docker.io recommends it, but an apt
# set not to install recommends leaves it out), else gzip: the same format.
gz() { if command -v pigz >/dev/null; then pigz "$@"; else gzip "$@"; fi; }
done_with() { # tags the image with the name kind-config.yaml gives, and says it
	docker tag "$image" "$alias"
	step "$image, tagged $alias"
	echo "$alias"
	exit 0
}

if docker image inspect "$image" >/dev/null 2>&1; then
	done_with
fi
if [[ -f $saved ]]; then
	step "loading the cached node image ($saved)"
	gz -dc "$saved" | docker load >&2
	done_with
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/tally-node-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$cache/rootfs" "$work/bin" "$work/images"

step "1/6 Kubernetes commands from k8s.io/kubernetes $k8s_version"
k8s_bin=$(bash "$repo/hack/controlplane/build.sh" kubelet kubeadm kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy etcd)

step "2/6 CoreDNS, crictl, the CNI plugins and pause from their Go modules"
tools="$cache/tools/coredns${coredns_version}-cni${cni_plugins_version}-crictl${crictl_version}"
install_tool() { # module@version, built once into $tools
	local name=${1%@*}
	name=${name##*/}
	[[ -x $tools/$name ]] && return 0
	step "   building $1"
	CGO_ENABLED=0 GOBIN="$tools" GOFLAGS=-trimpath go install -ldflags=-s "$1" >&2
}
install_tool "github.com/coredns/coredns@$coredns_version"
install_tool "sigs.k8s.io/cri-tools/cmd/crictl@$crictl_version"
for plugin in main/bridge main/loopback ipam/host-local meta/portmap; do
	install_tool "github.com/containernetworking/plugins/plugins/$plugin@$cni_plugins_version"
done
CGO_ENABLED=0 go -C "$repo" build -trimpath -ldflags=-s -o "$work/bin/pause" ./hack/kind/pause

step "3/6 Debian $debian_suite root filesystems (debootstrap)"
debian_rootfs() { # name packages: a cached tarball of a minimal Debian with the packages
	local tarball
	tarball="$cache/rootfs/$1-$debian_suite-$(echo "$2" | sha256sum | cut -c1-12).tar"
	if [[ ! -f $tarball ]]; then
		step "   debootstrap $1 ($2)"
		command -v debootstrap >/dev/null || {
			[[ $(id -u) == 0 ]] || { echo "node-image: debootstrap is not installed" >&2; exit 1; }
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >&2
		}
		local dir="$work/rootfs-$1"
		debootstrap --variant=minbase --include="$2" "$debian_suite" "$dir" "$debian_mirror" >"$work/debootstrap-$1.log" 2>&1 ||
			{ tail -20 "$work/debootstrap-$1.log" >&2; exit 1; }
		# Package lists and downloaded packages are not needed in an image.
		rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
		tar -C "$dir" -cf "$tarball.tmp" .
		mv "$tarball.tmp" "$tarball"
		rm -rf "$dir"
	fi
	echo "$tarball"
}
node_rootfs=$(debian_rootfs node "$node_packages")
proxy_rootfs=$(debian_rootfs kube-proxy "$proxy_packages")

step "4/6 control-plane images, each its static binary and nothing else"
# scratch_image name:tag binary entrypoint...: an image of one file at
# /usr/local/bin (the static Pods' commands name the binary, found on PATH).
scratch_image() {
	local ref=$1 binary=$2
	shift 2
	local ctx="$work/ctx-${ref//[\/:]/_}"
	mkdir -p "$ctx/usr/local/bin"
	cp "$binary" "$ctx/usr/local/bin/"
	tar -C "$ctx" -c . | docker import \
		--change "ENV PATH=/usr/local/bin" \
		--change "ENTRYPOINT $(printf '["%s"]' "$@" | sed 's/\]\[/,/g')" \
		- "$ref" >/dev/null
	images+=("$ref")
}
images=()
scratch_image "registry.k8s.io/kube-apiserver:$k8s_version" "$k8s_bin/kube-apiserver" /usr/local/bin/kube-apiserver
scratch_image "registry.k8s.io/kube-controller-manager:$k8s_version" "$k8s_bin/kube-controller-manager" /usr/local/bin/kube-controller-manager
scratch_image "registry.k8s.io/kube-scheduler:$k8s_version" "$k8s_bin/kube-scheduler" /usr/local/bin/kube-scheduler
scratch_image "registry.k8s.io/etcd:$etcd_tag" "$k8s_bin/etcd" /usr/local/bin/etcd
scratch_image "registry.k8s.io/coredns/coredns:$coredns_version" "$tools/coredns" /usr/local/bin/coredns
scratch_image "registry.k8s.io/pause:$pause_tag" "$work/bin/pause" /usr/local/bin/pause
# kube-proxy programs iptables (and nftables): it needs those commands.
proxy_ref="registry.k8s.io/kube-proxy:$k8s_version"
{
	mkdir -p "$work/ctx-proxy/usr/local/bin"
	cp "$k8s_bin/kube-proxy" "$work/ctx-proxy/usr/local/bin/"
	docker import "$proxy_rootfs" "$proxy_ref-base" >/dev/null
	printf 'FROM %s\nCOPY usr/local/bin/kube-proxy /usr/local/bin/kube-proxy\nENTRYPOINT ["/usr/local/bin/kube-proxy"]\n' "$proxy_ref-base" >"$work/ctx-proxy/Dockerfile"
	DOCKER_BUILDKIT=0 docker build -q -t "$proxy_ref" "$work/ctx-proxy" >/dev/null 2>"$work/build-proxy.log" ||
		{ cat "$work/build-proxy.log" >&2; exit 1; }
	docker rmi "$proxy_ref-base" >/dev/null
	images+=("$proxy_ref")
}
# One archive per image: the node's node-images.service imports them all.
for ref in "${images[@]}"; do
	docker save "$ref" -o "$work/images/$(echo "$ref" | tr '/:' '__').tar"
	docker rmi "$ref" >/dev/null
done

step "5/6 the node image $image"
ctx="$work/ctx-node"
mkdir -p "$ctx"
cp -a "$here/node/files" "$ctx/files"
mkdir -p "$ctx/files/usr/local/bin" "$ctx/files/opt/cni/bin" "$ctx/files/kind"
cp "$k8s_bin/kubelet" "$k8s_bin/kubeadm" "$k8s_bin/kubectl" "$tools/crictl" "$ctx/files/usr/local/bin/"
cp "$tools/bridge" "$tools/loopback" "$tools/host-local" "$tools/portmap" "$ctx/files/opt/cni/bin/"
echo "$k8s_version" >"$ctx/files/kind/version"
mv "$work/images" "$ctx/files/kind/images"
cp "$here/node/Dockerfile" "$ctx/Dockerfile"
docker import "$node_rootfs" "tally.local/kind-node-base:$key" >/dev/null
DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE=tally.local/kind-node-base:$key" -t "$image" "$ctx" >/dev/null 2>"$work/build-node.log" ||
	{ cat "$work/build-node.log" >&2; exit 1; }
docker rmi "tally.local/kind-node-base:$key" >/dev/null

step "6/6 saving it to $saved"
docker save "$image" | gz -1 >"$saved.tmp"
mv "$saved.tmp" "$saved"
# Older saves (other keys) are of no further use.
find "$cache" -maxdepth 1 -name 'node-*.tar.gz' ! -name "$(basename "$saved")" -delete
done_with
