# Laneway: one image for `laneway serve`, `laneway worker` and the other subcommands.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /srv/laneway
COPY pyproject.toml README.md LICENSE ./
COPY app ./app
COPY migrations ./migrations
# Editable, so laneway/store/migrate.py finds migrations/ next to the package.
RUN pip install --no-cache-dir -e . \
    && useradd --system --home-dir /srv/laneway laneway \
    && mkdir -p /srv/laneway/.laneway \
    && chown laneway /srv/laneway/.laneway
USER laneway

EXPOSE 8000
ENTRYPOINT ["laneway"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
