# A stand-in for python:3.11-slim, from Debian's own packages (deploy/local-images.sh builds it
# where no image registry answers). Debian's python3.11 with a virtualenv first on PATH, so
# `python` and `pip` behave as in the official image (no PEP 668 refusal, no sudo).
ARG DEBIAN_IMAGE=synattn-local/debian:bookworm
FROM ${DEBIAN_IMAGE}
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3.11 python3.11-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
    && python3.11 -m venv /opt/python
ENV PATH=/opt/python/bin:$PATH
CMD ["python3"]
