# Laneway: one image for `laneway serve`, `laneway worker` and the other subcommands.
#
# Stage `build` turns the source into a wheel; the final stage installs only that wheel (no
# source tree, no editable install) and adds app/, the service's example workflows, which the
# wheel leaves out. docs/deploying.md shows how to add workflow modules of your own.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY laneway ./laneway
COPY laneway_entry.py ./
COPY migrations ./migrations
RUN pip wheel --no-deps --wheel-dir /dist .

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONPATH=/srv/laneway \
    LANEWAY_WORKFLOWS=app.examples \
    HOST=0.0.0.0 \
    PORT=8000
# PYTHONPATH makes the modules under /srv/laneway (app/, and yours) importable for
# LANEWAY_WORKFLOWS wherever the command runs (serve and worker also add their working
# directory). serve and worker refuse to start with no workflows, so a bare image serves the
# examples; an image of your own sets LANEWAY_WORKFLOWS to its modules. HOST and PORT are where
# `serve` listens (`docker run -e PORT=9000 …` moves it; flags would override them).
COPY --from=build /dist/ /tmp/dist/
# The `pinned` extra: the exact dependency versions this release is tested with.
RUN pip install "$(ls /tmp/dist/laneway-*.whl)[pinned]" \
    && rm -rf /tmp/dist \
    && useradd --system --uid 10001 --no-create-home --home-dir /srv/laneway laneway \
    && mkdir -p /srv/laneway/.laneway \
    && chown laneway /srv/laneway/.laneway
WORKDIR /srv/laneway
COPY app ./app
# By number: a runtime that checks runAsNonRoot (Kubernetes) cannot tell a name is not root.
# No HEALTHCHECK: the same image runs worker and migrate too; probe serve's /healthz from the
# orchestrator (docker-compose.yml does); a worker's /metrics, given LANEWAY_METRICS_PORT.
USER 10001

EXPOSE 8000
ENTRYPOINT ["laneway"]
CMD ["serve"]
