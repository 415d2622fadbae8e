# The image the chart runs: `barge` (operator, queue worker, emulator) on python:3.11-slim.
# Not built on the development machines (no container runtime there); see the README's "What is verified".
#
#   docker build -t ghcr.io/barge-dev/barge:0.1.0 .
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
 && /opt/barge/bin/pip install --require-hashes --no-deps --only-binary=:all: -r runtime.lock
# Barge itself: plain source on the path and a console script, so no unpinned build backend runs here.
COPY operator/barge /opt/barge/lib/python3.11/site-packages/barge
RUN printf '#!/opt/barge/bin/python\nimport sys\nfrom barge.cli.main import app\nsys.exit(app())\n' \
      > /opt/barge/bin/barge \
 && chmod 0755 /opt/barge/bin/barge \
 && /opt/barge/bin/python -m compileall -q /opt/barge/lib/python3.11/site-packages/barge \
 && /opt/barge/bin/barge version

FROM ${PYTHON_IMAGE}
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
