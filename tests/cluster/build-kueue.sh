#!/usr/bin/env bash
# Builds, once, the real Kueue controller the Kueue tests run against the project's control plane
# (tests/cluster/kueue.py): sigs.k8s.io/kueue/cmd/kueue at the version below, from the Go module
# proxy (the module has no replace directives, so `go install <pkg>@<version>` builds it as
# released), plus its CRDs and webhook configurations from the same module
# (config/components/crd/bases, config/components/webhook/manifests.yaml -> crds/webhook.yaml).
#
# Cached in ${ATLASRUN_TOOLS_CACHE:-~/.cache/atlasrun/tools}/kueue-<version>/ (bin/kueue, crds/);
# idempotent and safe to run concurrently (flock). On stdout it prints only
#   KUEUE=/path/to/kueue
#   KUEUE_CRDS=/path/to/crds
# A cold build takes about 5-8 minutes on 2 cores.
#
#   build-kueue.sh           build what is missing, print the paths
#   build-kueue.sh --check   never build: print the paths, or exit 3 if missing
#
# Go: the same toolchain the control plane is built with (go >= 1.21 on PATH, /usr/local/go, or
# the toolchain build-controlplane.sh fetched into its cache).
set -euo pipefail

version=v0.15.0   # the only version the module proxy serves here (see /work/shared/FACTS.md)
cache_root=${ATLASRUN_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/atlasrun/tools}
dest="$cache_root/kueue-$version"
log() { printf 'build-kueue: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

print_paths() { echo "KUEUE=$dest/bin/kueue"; echo "KUEUE_CRDS=$dest/crds"; }
built() { [ -x "$dest/bin/kueue" ] && [ -s "$dest/crds/kueue.x-k8s.io_workloads.yaml" ] && [ -s "$dest/crds/webhook.yaml" ]; }

if [ "${1:-}" = --check ]; then
  built || { log "Kueue $version is not built yet (run $0)"; exit 3; }
  print_paths
  exit 0
fi
[ $# -eq 0 ] || die "usage: $0 [--check]"

mkdir -p "$cache_root"
exec 9>"$cache_root/.lock-kueue"
if ! flock -n 9; then
  log "another build-kueue.sh is running; waiting for it"
  flock 9
fi
if built; then log "Kueue $version already built in $dest"; print_paths; exit 0; fi

find_go() {
  local g k8s_cache=${ATLASRUN_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/atlasrun/k8s}
  for g in "${GO:-}" "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go "$k8s_cache"/toolchain/*/go/bin/go; do
    if [ -n "$g" ] && [ -x "$g" ]; then echo "$g"; return; fi
  done
  die "no Go toolchain: run tests/cluster/build-controlplane.sh (make controlplane) first"
}

go=$(find_go)
export GOTOOLCHAIN=auto GOFLAGS="-buildvcs=false" CGO_ENABLED=0
tmp="$cache_root/.tmp-kueue.$$"
rm -rf "$tmp" && mkdir -p "$tmp/bin" "$tmp/crds"
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
log "building sigs.k8s.io/kueue/cmd/kueue@$version with $("$go" version)"
GOBIN="$tmp/bin" "$go" install -trimpath -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$version" \
  "sigs.k8s.io/kueue/cmd/kueue@$version" >&2
moddir=$("$go" mod download -json "sigs.k8s.io/kueue@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
[ -d "$moddir/config/components/crd/bases" ] || die "no CRDs in $moddir"
cp "$moddir"/config/components/crd/bases/*.yaml "$tmp/crds/"
cp "$moddir/config/components/webhook/manifests.yaml" "$tmp/crds/webhook.yaml"
chmod -R u+w "$tmp"
rm -rf "$dest" && mv "$tmp" "$dest"
trap - EXIT
log "built in $((SECONDS - start))s"
print_paths
