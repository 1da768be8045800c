#!/usr/bin/env bash
# Builds vidcurate's container image (Containerfile) and tags it vidcurate:<version> and
# vidcurate:latest, with podman or docker, whichever runs here (VIDCURATE_ENGINE to choose).
#
#   ./scripts/image.sh                 # build (a second build reuses the cargo and layer caches)
#   ./scripts/image.sh --save FILE     # build, then write FILE: an OCI archive (podman) or a
#                                      # docker archive (docker), for Apptainer or a node's runtime
#   ./scripts/image.sh --run-flags     # the flags `podman run` needs on this machine (see below)
#
# The context is the repository's tracked files plus any models scripts/fetch_models.sh already
# fetched (checked again by their sums inside the build), never target/ or data/runs.
#
# Base images: BASE (runtime, default debian:bookworm-slim) and BUILDER (Rust >= 1.92 on bookworm,
# default rust:1.95-slim-bookworm) are pulled from the registry. Where no registry can be reached,
# they are made here instead, from Debian's packages with mmdebstrap (apt install mmdebstrap;
# as root), the builder with this machine's own Rust toolchain copied in. Set BASE or BUILDER to
# use images of your own (a mirror, say); DEBIAN_MIRROR for mmdebstrap's mirror.
#
# Some sandboxes refuse a container's setrlimit (runc: "error setting rlimit type 7"); there the
# script passes --ulimit values this machine allows, to the build and to what --run-flags prints.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "image: $*" >&2; exit 1; }

engine() {
  if [ -n "${VIDCURATE_ENGINE:-}" ]; then echo "$VIDCURATE_ENGINE"; return; fi
  for e in podman docker; do
    if command -v "$e" >/dev/null && "$e" info >/dev/null 2>&1; then echo "$e"; return; fi
  done
  die "neither podman nor docker runs here (Debian/Ubuntu: apt install podman)"
}
E=$(engine)

have_image() { "$E" image inspect "$1" >/dev/null 2>&1; }

# Debian bookworm as an image, from Debian's packages: $1 tag, then mmdebstrap's own options.
debian_image() {
  local tag=$1; shift
  command -v mmdebstrap >/dev/null || die "no registry reachable for the base images, and mmdebstrap is missing (apt install mmdebstrap), or set BASE and BUILDER"
  [ "$(id -u)" -eq 0 ] || die "making the base images with mmdebstrap needs root here (or set BASE and BUILDER)"
  echo "image: no registry reached; making $tag from Debian's packages (mmdebstrap)"
  mmdebstrap --quiet --variant=minbase --format=tar "$@" bookworm - "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" \
    | "$E" import --change 'CMD ["bash"]' - "$tag" >/dev/null
}

# $1: the image a registry would give; echoes the image to build from.
base() {
  local want=$1
  if have_image "$want" || "$E" pull -q "$want" >/dev/null 2>&1; then echo "$want"; return; fi
  # As slim as debian:bookworm-slim: dpkg leaves out docs (but copyrights), man pages and
  # locales, in this image and in every package later installed on it.
  local tag=localhost/vidcurate-base:bookworm-slim
  have_image "$tag" || debian_image "$tag" --include=ca-certificates \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --dpkgopt='path-include=/usr/share/locale/locale.alias' --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-include=/usr/share/doc/*/copyright' >&2
  echo "$tag"
}

builder() {
  local want=$1
  if have_image "$want" || "$E" pull -q "$want" >/dev/null 2>&1; then echo "$want"; return; fi
  command -v rustc >/dev/null || die "no registry reachable for $want and no Rust here to copy into a builder: set BUILDER"
  local sysroot ver
  sysroot=$(rustc --print sysroot)
  ver=$(rustc --version | awk '{print $2}')
  local tag=localhost/vidcurate-builder:bookworm-rust$ver
  # The toolchain's bin and lib only (its docs are most of its size), in /usr/local/rust, which
  # the Containerfile's build stage puts on PATH.
  have_image "$tag" || debian_image "$tag" --include=ca-certificates,gcc,libc6-dev \
    --customize-hook="mkdir -p \"\$1/usr/local/rust\" \"\$1/usr/local/cargo\" && cp -a '$sysroot/bin' '$sysroot/lib' \"\$1/usr/local/rust/\"" >&2
  echo "$tag"
}

# The --ulimit flags this machine needs (none where the engine's defaults work).
run_flags() {
  local img=$1
  if "$E" run --rm "$img" true >/dev/null 2>&1; then return; fi
  local nofile nproc pidmax
  nofile=$(ulimit -Hn); nproc=$(ulimit -Hu); pidmax=$(cat /proc/sys/kernel/pid_max 2>/dev/null || echo 32768)
  [ "$nproc" = unlimited ] || [ "$nproc" -gt "$pidmax" ] && nproc=$pidmax
  local flags="--ulimit nofile=$nofile:$nofile --ulimit nproc=$nproc:$nproc"
  # shellcheck disable=SC2086
  "$E" run --rm $flags "$img" true >/dev/null 2>&1 || die "$E cannot start a container here, even with $flags"
  echo "$flags"
}

SAVE=""
case "${1:-}" in
  "" | --run-flags) ;;
  --save) SAVE=${2:?usage: image.sh --save FILE} ;;
  *) die "unknown argument $1 (image.sh [--save FILE | --run-flags])" ;;
esac
BASE_IMG=$(base "${BASE:-docker.io/library/debian:bookworm-slim}")
if [ "${1:-}" = "--run-flags" ]; then run_flags "$BASE_IMG"; exit 0; fi
BUILDER_IMG=$(builder "${BUILDER:-docker.io/library/rust:1.95-slim-bookworm}")
FLAGS=$(run_flags "$BASE_IMG")

VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)

# The context: tracked (and new, not ignored) files as they are in the work tree; then what the
# build would fetch, fetched here where this machine can (its network may need its own CA
# certificates, which stay out of the image): the crates, the models, the yt-dlp wheel.
CTX=target/image/context
rm -rf "$CTX"; mkdir -p "$CTX/data/models"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard \
    | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$CTX"
else
  tar --exclude=./target --exclude=./data --exclude=./docs/book --exclude=./.git -cf - . | tar -xf - -C "$CTX"
fi
if command -v cargo >/dev/null; then
  cargo vendor --quiet --locked --versioned-dirs "$CTX/vendor" >/dev/null \
    || { echo "image: cargo vendor failed here; the build fetches the crates itself" >&2; rm -rf "$CTX/vendor"; }
fi
if [ -d data/models ]; then cp -al data/models/. "$CTX/data/models/" 2>/dev/null || cp -a data/models/. "$CTX/data/models/"; fi
YTDLP_VERSION=$(sed -n 's/^YTDLP_VERSION=//p' scripts/setup.sh)
if python3 -m pip --version >/dev/null 2>&1; then
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$CTX/data/wheels" "yt-dlp==$YTDLP_VERSION" || rm -rf "$CTX/data/wheels"
fi

echo "image: building vidcurate:$VERSION (commit $COMMIT) with $E from $BUILDER_IMG and $BASE_IMG"
start=$(date +%s)
# shellcheck disable=SC2086
"$E" build $FLAGS --network host -f Containerfile \
  --build-arg "BASE=$BASE_IMG" --build-arg "BUILDER=$BUILDER_IMG" --build-arg "VIDCURATE_COMMIT=$COMMIT" \
  --build-arg "YTDLP_VERSION=$YTDLP_VERSION" \
  --label "org.opencontainers.image.version=$VERSION" --label "org.opencontainers.image.revision=$COMMIT" \
  -t "vidcurate:$VERSION" -t vidcurate:latest "$CTX"
secs=$(( $(date +%s) - start ))
size=$("$E" image inspect vidcurate:latest --format '{{.Size}}')
echo "image: vidcurate:$VERSION and vidcurate:latest built in ${secs}s; $((size / 1000000)) MB"
if [ -n "$SAVE" ]; then
  if [ "$E" = podman ]; then "$E" save --format oci-archive -o "$SAVE" "vidcurate:$VERSION"; else "$E" save -o "$SAVE" "vidcurate:$VERSION"; fi
  echo "image: wrote $SAVE (apptainer build vidcurate.sif $([ "$E" = podman ] && echo oci-archive || echo docker-archive)://$SAVE)"
fi
