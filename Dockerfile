FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY saga_core saga_core
COPY events events
COPY workers workers
COPY projections projections
COPY sagafleet sagafleet
RUN pip install --no-cache-dir .
USER nobody
CMD ["sagafleet", "--help"]
