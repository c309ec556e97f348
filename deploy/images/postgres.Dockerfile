# A stand-in for postgres:16-alpine, from Debian's PostgreSQL 15: the official image's
# environment (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB, PGDATA), its data directory
# /var/lib/postgresql/data (the compose volume), pg_isready for the health check, and password
# (scram-sha-256) logins from the other containers.
ARG DEBIAN_IMAGE=synattn-local/debian:bookworm
FROM ${DEBIAN_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8
RUN apt-get update \
    && apt-get install -y --no-install-recommends postgresql-15 \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
    && mkdir -p /var/lib/postgresql/data /var/run/postgresql \
    && chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql \
    && chmod 700 /var/lib/postgresql/data
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
USER postgres
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
CMD ["postgres"]
