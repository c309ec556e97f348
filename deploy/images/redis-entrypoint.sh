#!/bin/sh
# As the official redis image: `redis-server` with no config file gets --protected-mode no,
# since inside a container network the other services are not on loopback.
set -e
if [ "$1" = "redis-server" ]; then
    case "$2" in
        *.conf) ;;
        *) shift; set -- redis-server "$@" --protected-mode no ;;
    esac
fi
exec "$@"
