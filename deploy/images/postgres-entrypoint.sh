#!/bin/sh
# The official postgres image's first-start rule, in short: an empty PGDATA is initialised with
# POSTGRES_USER / POSTGRES_PASSWORD as the superuser and POSTGRES_DB created; then the server
# listens on every interface and asks other hosts for the password.
set -eu
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
if [ "${1:-}" = "postgres" ] && [ ! -s "$PGDATA/PG_VERSION" ]; then
    if [ -z "${POSTGRES_PASSWORD:-}" ]; then
        echo "postgres: POSTGRES_PASSWORD must be set" >&2
        exit 1
    fi
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust \
        --auth-host=scram-sha-256 -E UTF8 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    if [ "$POSTGRES_DB" != "postgres" ]; then
        psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d postgres -q \
            -c "CREATE DATABASE \"$POSTGRES_DB\""
    fi
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
if [ "${1:-}" = "postgres" ]; then
    shift
    exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
fi
exec "$@"
