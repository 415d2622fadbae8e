# The image the chart runs: `barge` (operator, queue worker, emulator) on python:3.11-slim.
#
#   docker build -t ghcr.io/barge-dev/barge:0.1.0 .
#
# `make image` (tools/image.py) builds this same file with podman and no registry, on a Debian bookworm base made
# by mmdebstrap with Python 3.11 from Debian (PYTHON_IMAGE=localhost/debian-python:3.11-bookworm).
#
# Dependencies are exactly the pins of requirements.lock, hash-checked; the dev tools in the lock (pytest,
# mypy, moto, ...) are left out by tools/runtime_requirements.py, which follows the lock's "# via" graph.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY requirements.lock tools/runtime_requirements.py ./
RUN python runtime_requirements.py requirements.lock > runtime.lock \
 && python -m venv /opt/barge \
 && /opt/barge/bin/pip install --require-hashes --no-deps --only-binary=:all: -r runtime.lock \
 && /opt/barge/bin/pip uninstall --yes --quiet pip setuptools \
 && rm -f /opt/barge/bin/Activate.ps1
# botocore ships the models of every AWS service (27 MB); Barge's S3 storage needs S3's, the credential chain
# (IRSA, SSO, sign-in) STS's, SSO's and sign-in's, and type bedrock bedrock's and bedrock-runtime's. The shared
# endpoint and retry tables stay.
RUN cd /opt/barge/lib/python3.11/site-packages/botocore/data \
 && find . -mindepth 1 -maxdepth 1 -type d ! -name s3 ! -name sts ! -name sso ! -name sso-oidc ! -name signin \
      ! -name bedrock ! -name bedrock-runtime -exec rm -rf {} +
# google-genai's wheel carries its own test suite (5.4 MB of source).
RUN rm -rf /opt/barge/lib/python3.11/site-packages/google/genai/tests
# Barge itself: plain source on the path and a console script, so no unpinned build backend runs here.
COPY operator/barge /opt/barge/lib/python3.11/site-packages/barge
# Third-party code is kept as bytecode only (compiled beside where the source was, which it replaces: 108 MB
# less). The root filesystem is read-only, so bytecode compiled at start would never be kept and every start would
# pay for it; a traceback through a library names its file and line but shows no source text. Barge's own code
# keeps its source.
RUN cd /opt/barge/lib/python3.11/site-packages \
 && /opt/barge/bin/python -m compileall -q -b -x '^\./barge/' . \
 && find . -path ./barge -prune -o -name '*.py' -type f -exec rm -f {} + \
 && find . -path ./barge -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
RUN printf '#!/opt/barge/bin/python\nimport sys\nfrom barge.cli.main import app\nsys.exit(app())\n' \
      > /opt/barge/bin/barge \
 && chmod 0755 /opt/barge/bin/barge \
 && /opt/barge/bin/python -m compileall -q /opt/barge/lib/python3.11/site-packages/barge \
 && /opt/barge/bin/barge version

FROM ${PYTHON_IMAGE}
# No pip, setuptools or wheel in the image that runs (python:3.11-slim ships them; the Debian base has none).
RUN rm -rf /usr/local/lib/python3.11/site-packages/pip /usr/local/lib/python3.11/site-packages/pip-* \
      /usr/local/lib/python3.11/site-packages/setuptools* /usr/local/lib/python3.11/site-packages/wheel* \
      /usr/local/lib/python3.11/site-packages/_distutils_hack /usr/local/bin/pip*
LABEL org.opencontainers.image.source="https://github.com/barge-dev/barge" \
      org.opencontainers.image.description="Barge: LLM work nobody is waiting for, off the request path" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --system --gid 10001 barge \
 && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin barge \
 && install -d -o 10001 -g 10001 -m 0750 /var/lib/barge
COPY --from=build /opt/barge /opt/barge
ENV PATH=/opt/barge/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# Numeric, so Kubernetes can check runAsNonRoot without reading /etc/passwd.
USER 10001:10001
WORKDIR /var/lib/barge
EXPOSE 8080
ENTRYPOINT ["barge"]
CMD ["operator"]
