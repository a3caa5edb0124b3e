#!/usr/bin/env bash
# Builds, once, what a real Kubernetes node needs for the node tests (tests/cluster/node.py):
#   runc, CNI plugins, docker-registry, iptables, ipset,    Debian packages (apt-get)
#   buildah, skopeo, mmdebstrap (the images: node_images.py)
#   containerd, containerd-shim-runc-v2                     github.com/containerd/containerd/v2 (Go proxy)
#   kubelet, kube-scheduler                                 the k8s.io/kubernetes module pinned in
#                                                           controlplane/go.mod (same Go caches)
#   kube-router                                             /work/shared/vendor (or $KUBE_ROUTER_SRC)
#   pause                                                   pause.c from the k8s.io/kubernetes module
#
# Everything goes to ~/.cache/atlasrun/node/<component>/<version>/ (flock, idempotent); every step
# prints its wall time on stderr. On stdout: NAME=/path lines (see print_paths).
#
#   build-node.sh           install/build what is missing, print the paths
#   build-node.sh --check   never build: print the paths, or exit 3 if anything is missing
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mod="$here/controlplane"
cache_root=${ATLASRUN_NODE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/atlasrun/node}
containerd_version=v2.4.2
kube_router_version=v2.11.1
kube_router_src=${KUBE_ROUTER_SRC:-/work/shared/vendor/kube-router-$kube_router_version.src.tar.gz}
debs=(runc containernetworking-plugins docker-registry iptables ipset iproute2 buildah skopeo mmdebstrap)
log() { printf 'build-node: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

k8s_version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}
                   $1 == "require" && $2 == "k8s.io/kubernetes" {print $3; exit}' "$mod/go.mod")
[ -n "$k8s_version" ] || die "no k8s.io/kubernetes requirement in $mod/go.mod"

k8s_dest="$cache_root/kubernetes/$k8s_version"
ctd_dest="$cache_root/containerd/$containerd_version"
kr_dest="$cache_root/kube-router/$kube_router_version"

print_paths() {
  echo "KUBELET=$k8s_dest/kubelet"
  echo "KUBE_SCHEDULER=$k8s_dest/kube-scheduler"
  echo "PAUSE=$k8s_dest/pause"
  echo "CONTAINERD=$ctd_dest/containerd"
  echo "CONTAINERD_SHIM=$ctd_dest/containerd-shim-runc-v2"
  echo "CTR=$ctd_dest/ctr"
  echo "KUBE_ROUTER=$kr_dest/kube-router"
  echo "RUNC=$(command -v runc)"
  echo "CNI_BIN_DIR=/usr/lib/cni"
  echo "REGISTRY=$(command -v docker-registry)"
}

missing() {
  local f
  for f in "$k8s_dest/kubelet" "$k8s_dest/kube-scheduler" "$k8s_dest/pause" "$ctd_dest/containerd" \
           "$ctd_dest/containerd-shim-runc-v2" "$ctd_dest/ctr" "$kr_dest/kube-router"; do
    [ -x "$f" ] || echo "${f#"$cache_root"/}"
  done
  for f in runc docker-registry iptables ipset ip nsenter buildah skopeo mmdebstrap; do command -v "$f" >/dev/null || echo "$f"; done
  [ -x /usr/lib/cni/bridge ] || echo containernetworking-plugins
}

if [ "${1:-}" = --check ]; then
  m=$(missing)
  [ -z "$m" ] || { log "not built yet: $(echo $m) (run make node)"; exit 3; }
  print_paths; exit 0
fi
[ $# -eq 0 ] || die "usage: $0 [--check]"

mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
flock -n 9 || { log "another build-node.sh is running; waiting for it"; flock 9; }

step() {  # step NAME CMD...: runs CMD, prints its wall time
  local t=$SECONDS; log "$1 ..."; "${@:2}"; log "$1: $((SECONDS - t)) s"
}

export GOTOOLCHAIN=auto GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
go=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
[ -x "$go" ] || go=$(bash "$here/build-controlplane.sh" >/dev/null; ls "$HOME"/.cache/atlasrun/k8s/toolchain/*/go/bin/go | head -1)
nice=(nice -n 10)

install_debs() {
  local need=() p
  for p in "${debs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
  [ ${#need[@]} -eq 0 ] && return
  [ "$(id -u)" -eq 0 ] || die "missing Debian packages ${need[*]} and not root"
  ( flock 8
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${need[@]}" >&2 ||
      { apt-get -o DPkg::Lock::Timeout=900 update -qq >&2; DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${need[@]}" >&2; }
  ) 8>"$cache_root/.lock-apt"
  # The Debian packages start their daemons; the tests run their own instances.
  systemctl disable --now docker-registry >/dev/null 2>&1 || true
}

build_k8s() {  # kubelet + kube-scheduler from a copy of the control plane module: same Go caches,
  local tmp="$cache_root/.tmp-k8s.$$"   # and the project's go.mod/go.sum stay untouched
  rm -rf "$tmp" && mkdir -p "$tmp/mod" && cp "$mod/go.mod" "$mod/go.sum" "$tmp/mod/"
  printf 'package main\nfunc main() {}\n' >"$tmp/mod/main.go"
  local minor=${k8s_version#v1.}; minor=${minor%%.*}
  local ldflags="-s -w" pkg var
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    for var in "gitVersion=$k8s_version" gitMajor=1 "gitMinor=$minor" gitTreeState=clean \
               buildDate=1970-01-01T00:00:00Z; do ldflags+=" -X $pkg.$var"; done
  done
  (cd "$tmp/mod" && "${nice[@]}" "$go" build -trimpath -tags selinux,notest,grpcnotrace \
     -ldflags "$ldflags" -o "$tmp/" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-scheduler) >&2
  local pause_c
  pause_c=$(cd "$tmp/mod" && "$go" list -m -f '{{.Dir}}' k8s.io/kubernetes)/build/pause/linux/pause.c
  "${nice[@]}" gcc -Os -static -o "$tmp/pause" -DVERSION="$k8s_version" "$pause_c" >&2
  mkdir -p "$k8s_dest" && mv -f "$tmp/kubelet" "$tmp/kube-scheduler" "$tmp/pause" "$k8s_dest/"
  rm -rf "$tmp"
}

build_containerd() {
  local tmp="$cache_root/.tmp-ctd.$$"
  rm -rf "$tmp" && mkdir -p "$tmp"
  GOBIN="$tmp" "${nice[@]}" "$go" install -trimpath -ldflags "-s -w" -tags no_btrfs,no_devmapper,no_zfs \
    "github.com/containerd/containerd/v2/cmd/containerd@$containerd_version" \
    "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$containerd_version" \
    "github.com/containerd/containerd/v2/cmd/ctr@$containerd_version" >&2
  mkdir -p "$ctd_dest" && mv -f "$tmp"/* "$ctd_dest/" && rm -rf "$tmp"
}

build_kube_router() {
  [ -f "$kube_router_src" ] || die "kube-router source not found: $kube_router_src (set KUBE_ROUTER_SRC)"
  local tmp="$cache_root/.tmp-kr.$$"
  rm -rf "$tmp" && mkdir -p "$tmp/src"
  tar -xzf "$kube_router_src" -C "$tmp/src"
  local dir; dir=$(dirname "$(find "$tmp/src" -maxdepth 3 -name go.mod | head -1)")
  (cd "$dir" && "$go" mod edit -replace github.com/vishvananda/netlink=github.com/vishvananda/netlink@v1.3.1 &&
     "$go" mod tidy >&2 &&
     "${nice[@]}" "$go" build -trimpath -ldflags "-s -w" -o "$tmp/kube-router" ./cmd/kube-router) >&2
  mkdir -p "$kr_dest" && mv -f "$tmp/kube-router" "$kr_dest/" && rm -rf "$tmp"
}

total=$SECONDS
step "Debian packages (${debs[*]})" install_debs
[ -x "$ctd_dest/containerd" ] && [ -x "$ctd_dest/ctr" ] || step "containerd $containerd_version" build_containerd
[ -x "$k8s_dest/kubelet" ] && [ -x "$k8s_dest/pause" ] || step "kubelet+kube-scheduler+pause $k8s_version" build_k8s
[ -x "$kr_dest/kube-router" ] || step "kube-router $kube_router_version" build_kube_router
log "node ready in $((SECONDS - total)) s"
[ -z "$(missing)" ] || die "still missing: $(missing | tr '\n' ' ')"
print_paths
