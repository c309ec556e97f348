#!/usr/bin/env bash
# Local stand-ins for the public base images that docker-compose.yml builds on, for a machine
# where no image registry answers (docker pull fails) but Debian's package mirror does:
#   synattn-local/debian:bookworm    debootstrap --variant=minbase, then docker import
#   synattn-local/python:3.11        for python:3.11-slim (PYTHON_IMAGE)
#   synattn-local/redis:7            for redis:7.2-alpine (REDIS_IMAGE), AOF in /data
#   synattn-local/postgres:15        for postgres:16-alpine (POSTGRES_IMAGE), same variables
#   synattn-local/torch-cpu:2.13.0   a CPU PyTorch base (TORCH_CPU_IMAGE) from a local wheel
#                                    (pip's find-links) or PyTorch's CPU index
# It writes the variables that point compose at them to $OUT_ENV (default
# build/docker/images.env). Images already built are kept: a second run takes seconds.
#
#   deploy/local-images.sh             build what is missing
#   deploy/local-images.sh --auto      only when the public images cannot be pulled; else
#                                      write an empty env file (nothing special is needed)
#   deploy/local-images.sh --rebuild   build every stand-in again
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=${LOCAL_PREFIX:-synattn-local}
CACHE=${SYNATTN_DOCKER_CACHE:-build/docker}
OUT_ENV=${OUT_ENV:-$CACHE/images.env}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
COMPOSE=${COMPOSE:-docker compose}
mode=${1:-build}
mkdir -p "$CACHE"

say() { printf 'local-images: %s\n' "$*" >&2; }
have() { docker image inspect "$1" >/dev/null 2>&1; }

if [[ $mode == --auto ]]; then
    missing=0
    for image in python:3.11-slim redis:7.2-alpine postgres:16-alpine; do
        have "$image" || timeout 60 docker pull -q "$image" >/dev/null 2>&1 || missing=1
    done
    if [[ $missing == 0 ]]; then
        say "the public base images are here or pullable; no stand-ins needed"
        # the CPU trainer still needs a CPU torch base: PyTorch's CPU index from the build
        : >"$OUT_ENV"
        exit 0
    fi
    say "a public base image cannot be pulled: building local stand-ins from Debian packages"
fi
[[ $mode == --rebuild ]] && docker image rm -f "$PREFIX/debian:bookworm" >/dev/null 2>&1 || true

started=$(date +%s)
if ! have "$PREFIX/debian:bookworm"; then
    if ! command -v debootstrap >/dev/null; then
        if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
            say "installing debootstrap (Debian)"
            { DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap ||
                { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q debootstrap; }; } \
                >"$CACHE/apt.log" 2>&1 || {
                say "apt-get install debootstrap failed; see $CACHE/apt.log"
                exit 1
            }
        else
            say "debootstrap is missing: apt-get install debootstrap"
            exit 1
        fi
    fi
    rootfs=$CACHE/rootfs
    if [[ ! -x $rootfs/bin/sh ]]; then
        rm -rf "$rootfs"
        say "debootstrap bookworm (minbase) into $rootfs"
        debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 || {
            say "debootstrap failed; see $CACHE/debootstrap.log"
            exit 1
        }
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
            "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* \
            "$rootfs"/usr/share/locale/*
        # what later apt-get installs leave out too (as Debian's own slim images do)
        printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
            'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' \
            'path-exclude /usr/share/locale/*' >"$rootfs/etc/dpkg/dpkg.cfg.d/synattn-slim"
        printf 'APT::Install-Recommends "false";\n' >"$rootfs/etc/apt/apt.conf.d/90synattn"
    fi
    tar -C "$rootfs" -c . | docker import - "$PREFIX/debian:bookworm" >/dev/null
    say "imported $PREFIX/debian:bookworm"
fi

# the torch context: the machine's own CPU wheel when pip knows one, else none (the index)
ctx=$CACHE/torch-context
mkdir -p "$ctx/wheels"
cp deploy/images/torch-cpu.Dockerfile "$ctx/"
pip_setting() {  # a value of the host's pip configuration (global or environment)
    python3 -m pip config list 2>/dev/null | sed -n "s/^[^=]*\.$1='\(.*\)'\$/\1/p"
}
links=$(pip_setting find-links | tr '\n' ' ')
for dir in ${PIP_FIND_LINKS:-} $links; do
    for whl in "$dir"/torch-"$TORCH_VERSION"+cpu-cp311-*.whl; do
        [[ -f $whl && ! -f $ctx/wheels/$(basename "$whl") ]] && cp "$whl" "$ctx/wheels/"
    done
done
cert=${PIP_CERT_FILE:-$(pip_setting cert | head -n 1)}
[[ -n $cert && -f $cert ]] || cert=$PWD/deploy/images/no-extra-ca.pem

export LOCAL_PREFIX=$PREFIX TORCH_VERSION TORCH_CONTEXT=$PWD/$ctx PIP_CERT_FILE=$cert
build() {  # profile, image names
    local profile=$1 todo=()
    shift
    for svc in "$@"; do
        local tag
        tag=$($COMPOSE -f deploy/images/compose.yml --profile "$profile" config --images "$svc")
        if [[ $mode == --rebuild ]] || ! have "$tag"; then todo+=("$svc"); fi
    done
    ((${#todo[@]})) || return 0
    say "building ${todo[*]}"
    $COMPOSE -f deploy/images/compose.yml --profile "$profile" build "${todo[@]}"
}
build debian python redis postgres
build torch torch-cpu

cat >"$OUT_ENV" <<ENV
PYTHON_IMAGE=$PREFIX/python:3.11
REDIS_IMAGE=$PREFIX/redis:7
POSTGRES_IMAGE=$PREFIX/postgres:15
TORCH_CPU_IMAGE=$PREFIX/torch-cpu:$TORCH_VERSION
ENV
say "stand-ins ready in $(($(date +%s) - started)) s; compose variables in $OUT_ENV"
docker image ls "$PREFIX/*" --format '{{.Repository}}:{{.Tag}}  {{.Size}}' >&2
