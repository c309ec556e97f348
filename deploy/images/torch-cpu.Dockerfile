# A CPU build of PyTorch on the Python base: from the wheels in this build context when there
# are any (deploy/local-images.sh copies the machine's local wheel here), else from PyTorch's
# CPU index. The index's default torch for Linux is the CUDA build (several GB); never that.
ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE}
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
COPY wheels/ /tmp/wheels/
# the host's CA bundle as a build secret where pip needs it (never stored in a layer)
RUN --mount=type=secret,id=pip_cert,required=false \
    if [ -s /run/secrets/pip_cert ]; then export PIP_CERT=/run/secrets/pip_cert; fi; \
    set -e; wheel=$(ls /tmp/wheels/torch-"$TORCH_VERSION"+cpu-*.whl 2>/dev/null | head -n 1); \
    if [ -n "$wheel" ]; then pip install --no-cache-dir "$wheel"; \
    else pip install --no-cache-dir --index-url "$TORCH_INDEX" "torch==$TORCH_VERSION"; fi; \
    rm -rf /tmp/wheels; python -c "import torch, sys; sys.exit(torch.version.cuda is not None)"
