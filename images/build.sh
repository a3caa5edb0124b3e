#!/usr/bin/env bash
# Build the AtlasRun images and record their digests in images/images.lock.
#
#   images/build.sh [TARGET...]            build (default: every target) and lock the digests
#   images/build.sh context TARGET DIR     only prepare TARGET's build context (wheels, npm cache)
#   images/build.sh targets                list the targets
#   images/build.sh base-rootfs OUT.tar    mmdebstrap a Debian bookworm rootfs with python3 (for BASE_ROOTFS)
#   images/build.sh refresh-bases          re-resolve images/base-digests.lock (crane or skopeo)
#
# Targets: runner, operator, mcp-<server> for each stdio server of the catalog.
#
# Step 1, on the host, while the registries are reachable: images/context.py downloads every
# Python dependency as wheels for the images' platform (pip download, CPython 3.11, glibc 2.36)
# and every npm package into an npm cache, into the target's build context.
# Step 2: buildah bud (chroot isolation, vfs storage: works unprivileged-ish, in containers and
# without a daemon); the Dockerfiles install with --no-index / --offline, so the build needs no
# package registry (except SERVER_APT_PACKAGES, i.e. git for the git server: Debian mirror).
# Step 3: the image is pushed (PUSH=1: to $REGISTRY; else to an OCI archive under $OUT_DIR) and
# the manifest digest of what was pushed goes to images/images.lock as name -> image@sha256.
# The archive can be published byte for byte later, so the digest stays the same:
#   skopeo copy --preserve-digests oci-archive:$OUT_DIR/<name>.oci.tar docker://$REGISTRY/<name>:$TAG
#
# Environment:
#   REGISTRY        image repository prefix (ghcr.io/atlasrun)
#   TAG             image tag (the atlasrun version)
#   PUSH            1: push to $REGISTRY and lock the pushed digest
#   BASE_ROOTFS     a rootfs tarball (e.g. from `base-rootfs`) imported as the Python base image
#                   instead of pulling PYTHON_IMAGE: for machines with no container registry.
#                   npm servers then still need NODE_IMAGE from a registry.
#   PYTHON_IMAGE, NODE_IMAGE   override images/base-digests.lock
#   STORAGE_DRIVER  buildah storage driver (vfs)      BUILDAH_ISOLATION  (chroot)
#   STORAGE_ROOT    buildah storage root (default: buildah's own); another driver needs its own root
#   COMPRESS        0: push uncompressed layers (faster; for a local registry)
#   CACHE_DIR       contexts and OCI archives (~/.cache/atlasrun/images)
#   LOCK            the lock file to write (images/images.lock)
#   SOURCE_DATE_EPOCH  image timestamps (default: the commit time of HEAD)
#   PYTHON          python with PyYAML for images/context.py (.venv/bin/python if present)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi
CTX_PY="$HERE/context.py"
REGISTRY=${REGISTRY:-ghcr.io/atlasrun}
TAG=${TAG:-$("$PYTHON" -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' "$ROOT/pyproject.toml")}
PUSH=${PUSH:-0}
STORAGE_DRIVER=${STORAGE_DRIVER:-vfs}
STORAGE_ROOT=${STORAGE_ROOT:-}
COMPRESS=${COMPRESS:-1}
BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}
CACHE_DIR=${CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/atlasrun/images}
OUT_DIR=${OUT_DIR:-$CACHE_DIR/oci}
export ATLAS_IMAGES_LOCK=${LOCK:-$HERE/images.lock}
if [[ -z "${SOURCE_DATE_EPOCH:-}" ]]; then
  SOURCE_DATE_EPOCH=$(git -C "$ROOT" log -1 --format=%ct 2>/dev/null || date +%s)
fi
export SOURCE_DATE_EPOCH

log() { printf '%s build.sh: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf 'build.sh: %s\n' "$*" >&2; exit 1; }
ctxpy() { "$PYTHON" "$CTX_PY" "$@"; }
bah() {
  if [[ -n "$STORAGE_ROOT" ]]; then
    buildah --root "$STORAGE_ROOT" --runroot "$STORAGE_ROOT.run" --storage-driver "$STORAGE_DRIVER" "$@"
  else
    buildah --storage-driver "$STORAGE_DRIVER" "$@"
  fi
}

base_ref() {  # the lock's reference for ARG $1, unless the environment overrides it
  local key=$1 value
  value=$(ctxpy base-images | sed -n "s/^$key=//p")
  [[ -n "$value" ]] || die "images/base-digests.lock has no $key"
  printf '%s' "${!key:-$value}"
}

# A rootfs tarball as a local base image, imported once per tarball content.
import_rootfs() {
  local tar=$1 sum name ctr
  [[ -f "$tar" ]] || die "BASE_ROOTFS=$tar is not a file"
  sum=$(sha256sum "$tar" | cut -c1-12)
  name="localhost/atlasrun-base/rootfs:$sum"
  if ! bah inspect --type image "$name" >/dev/null 2>&1; then
    log "importing $tar as $name"
    ctr=$(bah from scratch)
    bah add --quiet "$ctr" "$tar" / >/dev/null
    bah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
      --cmd /bin/sh --label "dev.atlasrun.base.rootfs-sha256=$(sha256sum "$tar" | cut -d' ' -f1)" "$ctr"
    bah commit --quiet --timestamp 0 "$ctr" "$name" >/dev/null
    bah rm "$ctr" >/dev/null
  fi
  printf '%s' "$name"
}

image_digest() { bah images --digests --format '{{.Digest}}' "$1" | head -n1; }

build_one() {
  local target=$1 ctx="$CACHE_DIR/contexts/$1" dockerfile image digestfile t0 t1 t2
  local -a args=() pull=()
  dockerfile=$(ctxpy dockerfile "$target")
  image="$REGISTRY/$target"
  t0=$(date +%s)
  log "$target: preparing the build context in $ctx"
  ctxpy prepare "$target" "$ctx"
  t1=$(date +%s)
  while IFS= read -r line; do
    if [[ -n "$line" ]]; then args+=(--build-arg "$line"); fi
  done < "$ctx/build-args"
  local python_image node_image base_note manager
  manager=$(sed -n 's/^SERVER_MANAGER=//p' "$ctx/build-args")
  if [[ -n "${BASE_ROOTFS:-}" ]]; then
    python_image=$(import_rootfs "$BASE_ROOTFS")
    base_note="rootfs $(basename "$BASE_ROOTFS") as $python_image@$(image_digest "$python_image")"
    pull=(--pull-never)
  else
    python_image=$(base_ref PYTHON_IMAGE)
    base_note=$python_image
  fi
  node_image=""
  if [[ "$manager" == npm ]]; then
    node_image=$(base_ref NODE_IMAGE)
    if [[ -n "${BASE_ROOTFS:-}" ]]; then pull=(); fi  # the Node.js stage may come from a registry
    base_note="$base_note; node $node_image"
  else
    node_image=$python_image  # the node stage is unused by pip servers: no extra pull
  fi
  args+=(--build-arg "PYTHON_IMAGE=$python_image")
  if [[ "$target" == mcp-* ]]; then args+=(--build-arg "NODE_IMAGE=$node_image"); fi
  log "$target: buildah bud ($dockerfile, base $base_note)"
  local before previous
  before=$(bah containers --quiet --all | sort)
  previous=$(bah images --quiet --no-trunc "$image:$TAG" 2>/dev/null || true)
  bah bud --isolation "$BUILDAH_ISOLATION" --format oci --timestamp "$SOURCE_DATE_EPOCH" "${pull[@]}" \
    -f "$dockerfile" -t "$image:$TAG" "${args[@]}" "$ctx"
  # buildah 1.28 leaves the working container of a stage that is only a COPY --from source
  # (the node stage): remove the containers that appeared during this build (so do not run
  # other buildah work on the same storage concurrently).
  comm -13 <(printf '%s\n' "$before") <(bah containers --quiet --all | sort) | while read -r leftover; do
    if [[ -n "$leftover" ]]; then bah rm "$leftover" >/dev/null; fi
  done
  # The image this tag named before, now untagged: drop it (kept if something still uses it).
  if [[ -n "$previous" && "$previous" != "$(bah images --quiet --no-trunc "$image:$TAG")" ]]; then
    bah rmi "$previous" >/dev/null 2>&1 || true
  fi
  t2=$(date +%s)
  local user entrypoint
  { read -r user; read -r entrypoint; } < <(bah inspect --type image "$image:$TAG" | "$PYTHON" -c \
    'import json, sys; c = json.load(sys.stdin)["OCIv1"]["config"]; print(c.get("User", "")); print(json.dumps(c.get("Entrypoint")))')
  case "${user%%:*}" in ""|0|root) die "$target: the image runs as root (User=$user)";; esac
  digestfile=$(mktemp)
  local dest published
  if [[ "$PUSH" == 1 ]]; then
    dest="docker://$image:$TAG"
    published="$image:$TAG"
  else
    mkdir -p "$OUT_DIR"
    rm -f "$OUT_DIR/$target.oci.tar"
    dest="oci-archive:$OUT_DIR/$target.oci.tar:$image:$TAG"
    published="oci-archive $OUT_DIR/$target.oci.tar (not in a registry yet)"
  fi
  local -a push_opts=()
  if [[ "$COMPRESS" == 0 ]]; then push_opts=(--disable-compression); fi
  bah push --quiet "${push_opts[@]}" --digestfile "$digestfile" "$image:$TAG" "$dest" >/dev/null
  local digest
  digest=$(cat "$digestfile")
  rm -f "$digestfile"
  [[ "$digest" =~ ^sha256:[0-9a-f]{64}$ ]] || die "$target: push gave no sha256 digest ($digest)"
  ctxpy lock-set "$target" "$image@$digest" "tag=$image:$TAG" "base=$base_note" "user=$user" \
    "entrypoint=$entrypoint" "builder=$(buildah --version)" "built_at=$(date -u +%Y-%m-%dT%H:%M:%SZ)" \
    "source_date_epoch=$SOURCE_DATE_EPOCH" "published=$published" \
    "local_image_digest=$(image_digest "$image:$TAG")"
  log "$target: $image@$digest (user $user, entrypoint $entrypoint; context $((t1 - t0))s, build $((t2 - t1))s, push $(($(date +%s) - t2))s)"
}

cmd=${1:-all}
case "$cmd" in
  targets)
    ctxpy targets ;;
  context)
    [[ $# -eq 3 ]] || die "usage: build.sh context TARGET DIR"
    ctxpy prepare "$2" "$3"
    cat "$3/build-args" ;;
  base-rootfs)
    [[ $# -eq 2 ]] || die "usage: build.sh base-rootfs OUT.tar"
    command -v mmdebstrap >/dev/null || die "mmdebstrap is missing (apt-get install mmdebstrap)"
    mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
    security=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
    mmdebstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
      bookworm "$2" "deb $mirror bookworm main" "deb $mirror bookworm-updates main" \
      "deb $security bookworm-security main" ;;
  refresh-bases)
    lock="$HERE/base-digests.lock"
    tmp=$(mktemp)
    while IFS= read -r line; do
      if [[ "$line" =~ ^([A-Z_]+)=([^@]+)@sha256:[0-9a-f]{64}$ ]]; then
        ref=${BASH_REMATCH[2]}
        if command -v crane >/dev/null; then digest=$(crane digest "$ref")
        elif command -v skopeo >/dev/null; then digest=$(skopeo inspect --format '{{.Digest}}' "docker://$ref")
        else die "refresh-bases needs crane or skopeo and a reachable registry"; fi
        echo "${BASH_REMATCH[1]}=$ref@$digest" >> "$tmp"
      else
        echo "$line" >> "$tmp"
      fi
    done < "$lock"
    mv "$tmp" "$lock"
    log "refreshed $lock; now update the ARG defaults in images/*/Dockerfile to match (tests/test_images.py checks)" ;;
  all|runner|operator|mcp-*)
    command -v buildah >/dev/null || die "buildah is missing (Debian: apt-get install buildah). The build contexts alone: build.sh context TARGET DIR"
    if [[ "$cmd" == all ]]; then mapfile -t targets < <(ctxpy targets); else targets=("$@"); fi
    for target in "${targets[@]}"; do build_one "$target"; done ;;
  *)
    sed -n '2,9p' "$0" >&2; exit 2 ;;
esac
