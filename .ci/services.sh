#!/usr/bin/env bash
# Start the local services the integration tests need when they are not already up.
# Redis backs the Celery integration tests; PostgreSQL the job-store test (queue issue).
set -uo pipefail

up() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if ! up 6379; then
  if command -v redis-server >/dev/null; then
    mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
      --dir /tmp --logfile /tmp/synattn-ci-redis.log
  else
    echo "redis-server is not installed (apt-get install redis-server)" >&2
  fi
fi
if ! up 5432 && ls /etc/postgresql >/dev/null 2>&1; then
  pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start || true
fi
# Headless Chromium renders the HTML report and, driven by Selenium through chromedriver, the
# services' pages in the browser tests (Debian's packages; root on CI machines).
if ! { command -v chromium && command -v chromedriver; } >/dev/null && command -v apt-get >/dev/null \
    && [ "$(id -u)" = 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver \
    >/tmp/synattn-ci-apt.log 2>&1 \
    || echo "could not install chromium (see /tmp/synattn-ci-apt.log)" >&2
fi
# A two-node Slurm cluster on this machine (Debian's slurm-wlm and munge, installed where
# missing): the Slurm executor's tests run against it (deploy/slurm/local-cluster.sh).
slurm="no slurm"
if [ "$(id -u)" = 0 ]; then
  if bash "$(dirname "$0")/../deploy/slurm/local-cluster.sh" up >/tmp/synattn-ci-slurm.log 2>&1; then
    slurm="slurm up (SLURM_CONF=/tmp/synattn-slurm/slurm.conf)"
  else
    echo "could not start the local Slurm cluster (see /tmp/synattn-ci-slurm.log)" >&2
  fi
fi
for _ in $(seq 50); do up 6379 && break; sleep 0.1; done
up 6379 || { echo "Redis is not reachable on 127.0.0.1:6379" >&2; exit 1; }
echo "services: redis up, $slurm$(up 5432 && echo ', postgres up')$(command -v chromium >/dev/null && echo ', chromium')$(command -v chromedriver >/dev/null && echo ', chromedriver')"
