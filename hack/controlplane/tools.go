//go:build tools

// Package controlplane pins the Kubernetes commands built from source: the
// control plane the integration tests run (kube-apiserver, etcd,
// kube-controller-manager) and, for the kind node image hack/kind builds, the
// node's commands (kubelet, kubeadm, kubectl) and the remaining control-plane
// images (kube-scheduler, kube-proxy).
package controlplane

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
