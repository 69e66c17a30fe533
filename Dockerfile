# syntax=docker/dockerfile:1
# The one escaler image: every command (`manager` by default, `slo-api`, `explain`, `crds`, ...).
#   docker build -t escaler:dev .        (make e2e E2E_CLUSTER=kind builds and loads it into kind)
#   docker run --rm escaler:dev version
# The builder stage builds the same wheel as `make dist`; the runtime stage installs its dependencies
# from requirements.lock (exact versions, every file's hash: pip refuses anything else; regenerated
# by hack/lock.sh), then only that wheel without resolving anything, removes pip, and runs as a
# non-root numeric user, so `runAsNonRoot: true` can verify it without a passwd entry. The simulator's
# plotting and LP stack (the `sim` extra) is not installed. tests/unit/test_dockerfile.py checks these
# properties and the lock; tests/e2e/test_distribution.py installs the same wheel into a clean
# virtualenv.

FROM python:3.11-slim AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
RUN pip install --no-cache-dir "build>=1.2" "setuptools>=77"
WORKDIR /src
COPY pyproject.toml README.md ./
COPY escaler ./escaler
RUN python -m build --no-isolation --wheel --outdir /dist .

FROM python:3.11-slim
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="escaler" \
      org.opencontainers.image.description="Elastic-scaling control plane for LLM inference on Kubernetes" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11-slim"
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY requirements.lock /tmp/requirements.lock
COPY --from=builder /dist/ /wheels/
RUN pip install --no-cache-dir --require-hashes -r /tmp/requirements.lock \
    && pip install --no-cache-dir --no-deps /wheels/escaler-*.whl \
    && rm -rf /wheels /tmp/requirements.lock \
    && python -m pip uninstall --yes pip setuptools wheel
USER 65532:65532
EXPOSE 8080 8081 8082 9443
ENTRYPOINT ["escaler"]
CMD ["manager"]
