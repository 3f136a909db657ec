# syntax=docker/dockerfile:1
#
# The `heddle` binary in a small runtime image. One image serves every role; the role is the
# command: `docker run heddle serve` (the default), `ingest`, `consume`, `query`, `migrate`.
# docker-compose.yml runs the distributed layout from it.

# ---- build ------------------------------------------------------------------------------------
FROM rust:1.95-bookworm AS build

# rdkafka builds its bundled librdkafka (2.12.x) with cmake; Debian's librdkafka is too old.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        cmake libcurl4-openssl-dev libssl-dev zlib1g-dev \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .

# The registry and target directories are BuildKit caches, so a rebuild after a source change
# recompiles only what changed; the binary is copied out of the cache in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked -p heddle \
    && install -D -m 0755 target/release/heddle /out/heddle

# ---- runtime ----------------------------------------------------------------------------------
FROM debian:bookworm-slim

# curl is for health checks (`curl -fsS http://127.0.0.1:6345/health`).
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ca-certificates libssl3 libcurl4 curl \
    && rm -rf /var/lib/apt/lists/*

# A fixed, non-root uid/gid, so volume ownership is predictable.
RUN groupadd --system --gid 10001 heddle \
    && useradd --system --uid 10001 --gid heddle --home-dir /var/lib/heddle \
        --shell /usr/sbin/nologin heddle \
    && mkdir -p /var/lib/heddle/data \
    && chown -R heddle:heddle /var/lib/heddle

COPY --from=build /out/heddle /usr/local/bin/heddle

# Inside a container the server must listen on all interfaces; the embedded store (serve without
# --clickhouse) keeps its data in /var/lib/heddle/data (mount a volume there to keep it).
ENV HEDDLE_LISTEN=0.0.0.0:6345 \
    HEDDLE_DATA_DIR=/var/lib/heddle/data

WORKDIR /var/lib/heddle
USER 10001:10001
EXPOSE 6345

# Right for `serve`, `ingest` and `query` on the default port; docker-compose.yml overrides it for
# `consume` (which serves /health on HEDDLE_METRICS_LISTEN) and disables it for `migrate`.
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
    CMD ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:6345/health"]

ENTRYPOINT ["heddle"]
CMD ["serve"]
