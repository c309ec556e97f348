# A stand-in for redis:7.2-alpine, from Debian's redis-server (7.0): the same command line,
# /data as its working directory (AOF and RDB files land in the compose volume), redis-cli for
# the health check, and the official image's entrypoint rule that a server started without a
# config file accepts connections from the other containers (protected mode off).
ARG DEBIAN_IMAGE=synattn-local/debian:bookworm
FROM ${DEBIAN_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8
RUN apt-get update \
    && apt-get install -y --no-install-recommends redis-server redis-tools \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
    && mkdir -p /data && chown redis:redis /data
COPY redis-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
WORKDIR /data
USER redis
EXPOSE 6379
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
CMD ["redis-server"]
