#!/usr/bin/env bash
# Builds, once, the Kubernetes control plane the cluster tests run (tests/cluster/controlplane.py):
#   etcd                     Debian's etcd-server package (apt-get), unless `etcd` is already on PATH
#   kube-apiserver,
#   kube-controller-manager,
#   kubectl                  built from the k8s.io/kubernetes module pinned in controlplane/go.mod
#   atlasrun-pki             controlplane/main.go: writes the test CA, serving/client certs, SA key
#
# The binaries go to ${ATLASRUN_K8S_CACHE:-~/.cache/atlasrun/k8s}/<k8s-version>/ and are reused by
# every later run. Idempotent and safe to run concurrently (flock). On stdout it prints only
#   ETCD=/path KUBE_APISERVER=/path KUBE_CONTROLLER_MANAGER=/path KUBECTL=/path ATLASRUN_PKI=/path
# (one per line); progress goes to stderr. A cold build takes 10-16 minutes on 2 cores (measured).
#
#   build-controlplane.sh           install/build what is missing, print the paths
#   build-controlplane.sh --check   never install or build: print the paths, or exit 3 if any is missing
#
# Go: needs go >= 1.21 on PATH (GOTOOLCHAIN=auto then fetches the toolchain pinned in go.mod from
# the Go module proxy if the local one is older), or none at all: then the pinned toolchain module
# (golang.org/toolchain) is fetched from $GOPROXY, verified against the h1: hash below, and
# unpacked into the cache.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mod="$here/controlplane"
cache_root=${ATLASRUN_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/atlasrun/k8s}
log() { printf 'build-controlplane: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

k8s_version=$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}
                   $1 == "require" && $2 == "k8s.io/kubernetes" {print $3; exit}' "$mod/go.mod")
[ -n "$k8s_version" ] || die "no k8s.io/kubernetes requirement in $mod/go.mod"
go_toolchain=$(awk '$1 == "toolchain" {print $2; exit}' "$mod/go.mod")   # e.g. go1.26.8
dest="$cache_root/$k8s_version"
binaries=(kube-apiserver kube-controller-manager kubectl)
# The PKI helper does not depend on the Kubernetes version but on its own source.
pki_dest="$cache_root/pki-$(cat "$mod/main.go" "$mod/go.mod" | sha256sum | cut -c1-12)"

print_paths() {
  echo "ETCD=$1"
  echo "KUBE_APISERVER=$dest/kube-apiserver"
  echo "KUBE_CONTROLLER_MANAGER=$dest/kube-controller-manager"
  echo "KUBECTL=$dest/kubectl"
  echo "ATLASRUN_PKI=$pki_dest/atlasrun-pki"
}

missing_binaries() {
  local b
  for b in "${binaries[@]}"; do [ -x "$dest/$b" ] || echo "$b"; done
  [ -x "$pki_dest/atlasrun-pki" ] || echo atlasrun-pki
}

if [ "${1:-}" = --check ]; then
  etcd_path=$(command -v etcd 2>/dev/null) || { log "etcd is not installed"; exit 3; }
  missing=$(missing_binaries)
  [ -z "$missing" ] || { log "not built yet: $(echo $missing) (run $0)"; exit 3; }
  print_paths "$etcd_path"
  exit 0
fi
[ $# -eq 0 ] || die "usage: $0 [--check]"

mkdir -p "$cache_root"
exec 9>"$cache_root/.lock"
if ! flock -n 9; then
  log "another build-controlplane.sh is running; waiting for it"
  flock 9
fi

# ---------------------------------------------------------------- etcd
ensure_etcd() {
  if command -v etcd >/dev/null 2>&1; then command -v etcd; return; fi
  log "etcd not found; installing Debian's etcd-server"
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "etcd is missing and we are not root (install etcd-server)"
    sudo=(sudo)
  fi
  (
    # apt itself serialises on its own lock; a second flock keeps two of our builds from racing it.
    flock 8
    command -v etcd >/dev/null 2>&1 && exit 0
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 update -qq >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends etcd-server >&2
  ) 8>"$cache_root/.lock-apt"
  command -v etcd >/dev/null 2>&1 || die "etcd-server installed but no etcd on PATH"
  command -v etcd
}

# ---------------------------------------------------------------- Go toolchain
# h1: (Go module dirhash) of golang.org/toolchain@v0.0.1-<go_toolchain>.linux-<arch>, from sum.golang.org.
toolchain_sum() {
  case "$1" in
    go1.26.8.linux-amd64) echo "h1:ZOmGe1OnfREDMIdb1Qi4G9JSuDPBLGExZMQ4nis1RXM=" ;;
    go1.26.8.linux-arm64) echo "h1:sYL/O6MqS68ML0kjsQ36WoYIpJqkw60TxizWUYUKQMc=" ;;
    *) return 1 ;;
  esac
}

go_usable() {  # go >= 1.21 understands GOTOOLCHAIN and can fetch the pinned toolchain itself
  local v
  v=$("$1" env GOVERSION 2>/dev/null) || return 1
  v=${v#go}
  local major=${v%%.*} rest=${v#*.}
  local minor=${rest%%[!0-9]*}
  [ "$major" -gt 1 ] || { [ "$major" -eq 1 ] && [ "${minor:-0}" -ge 21 ]; }
}

find_go() {
  local g
  for g in "${GO:-}" "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go \
           "$cache_root/toolchain/$go_toolchain/go/bin/go"; do
    if [ -n "$g" ] && [ -x "$g" ] && go_usable "$g"; then echo "$g"; return; fi
  done
  fetch_go
}

fetch_go() {
  local arch
  case "$(uname -m)" in
    x86_64) arch=amd64 ;; aarch64|arm64) arch=arm64 ;; *) die "no Go and no pinned toolchain for $(uname -m)" ;;
  esac
  local name="$go_toolchain.linux-$arch" sum
  sum=$(toolchain_sum "$name") || die "no go >= 1.21 found and no pinned hash for $name; install Go"
  local proxy=${GOPROXY:-https://proxy.golang.org}
  proxy=${proxy%%[,|]*}
  [ "$proxy" != direct ] && [ "$proxy" != off ] || proxy=https://proxy.golang.org
  local out="$cache_root/toolchain/$go_toolchain"
  log "no usable go; fetching golang.org/toolchain@v0.0.1-$name from $proxy"
  rm -rf "$out.tmp" && mkdir -p "$out.tmp"
  python3 - "$proxy/golang.org/toolchain/@v/v0.0.1-$name.zip" "$sum" "$out.tmp" "v0.0.1-$name" <<'PY' >&2
import base64, hashlib, io, os, sys, urllib.request, zipfile
url, want, out, version = sys.argv[1:]
data = urllib.request.urlopen(url, timeout=600).read()
zf = zipfile.ZipFile(io.BytesIO(data))
names = sorted(zf.namelist())
summary = "".join(f"{hashlib.sha256(zf.read(n)).hexdigest()}  {n}\n" for n in names)
got = "h1:" + base64.b64encode(hashlib.sha256(summary.encode()).digest()).decode()
if got != want:
    sys.exit(f"checksum mismatch for {url}: got {got}, want {want}")
prefix = f"golang.org/toolchain@{version}/"
for info in zf.infolist():
    if not info.filename.startswith(prefix) or info.is_dir():
        continue
    path = os.path.join(out, "go", info.filename[len(prefix):])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(zf.read(info))
    if (info.external_attr >> 16) & 0o111 or "/bin/" in info.filename or "/pkg/tool/" in info.filename:
        os.chmod(path, 0o755)
print(f"verified {got}")
PY
  rm -rf "$out" && mv "$out.tmp" "$out"
  echo "$out/go/bin/go"
}

# ---------------------------------------------------------------- Kubernetes binaries
build_missing() {
  local go
  go=$(find_go)
  export GOTOOLCHAIN=auto GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
  local tmp="$cache_root/.tmp.$$"
  rm -rf "$tmp" && mkdir -p "$tmp"
  trap 'rm -rf "$tmp"' EXIT
  local start=$SECONDS b pkgs=()
  for b in "${binaries[@]}"; do [ -x "$dest/$b" ] || pkgs+=("k8s.io/kubernetes/cmd/$b"); done
  if [ ${#pkgs[@]} -gt 0 ]; then
    log "building Kubernetes $k8s_version (${pkgs[*]##*/}) with $("$go" version)"
    log "(a cold build takes 10-16 min on 2 cores; caches: $("$go" env GOMODCACHE) $("$go" env GOCACHE))"
    # Same version stamping as kubernetes' hack/lib/version.sh, so /version reports the real release.
    local minor=${k8s_version#v1.}; minor=${minor%%.*}
    local ldflags="-s -w" pkg var
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      for var in "gitVersion=$k8s_version" "gitMajor=1" "gitMinor=$minor" "gitTreeState=clean" \
                 "buildDate=1970-01-01T00:00:00Z"; do
        ldflags+=" -X $pkg.$var"
      done
    done
    (cd "$mod" && "$go" build -trimpath -tags selinux,notest,grpcnotrace -ldflags "$ldflags" \
        -o "$tmp/" "${pkgs[@]}") >&2
    mkdir -p "$dest"
    for pkg in "${pkgs[@]}"; do
      b=${pkg##*/}
      [ -x "$tmp/$b" ] || die "$b was not built"
      mv -f "$tmp/$b" "$dest/$b"
    done
  fi
  if [ ! -x "$pki_dest/atlasrun-pki" ]; then
    (cd "$mod" && "$go" build -trimpath -ldflags "-s -w" -o "$tmp/atlasrun-pki" .) >&2
    mkdir -p "$pki_dest" && mv -f "$tmp/atlasrun-pki" "$pki_dest/atlasrun-pki"
  fi
  rm -rf "$tmp"; trap - EXIT
  log "built in $((SECONDS - start))s"
}

etcd_path=$(ensure_etcd)
if [ -n "$(missing_binaries)" ]; then
  build_missing
else
  log "Kubernetes $k8s_version already built in $dest"
fi
print_paths "$etcd_path"
