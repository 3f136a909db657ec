#!/usr/bin/env bash
# Runs heddle's whole test suite on a fresh machine: Rust unit and integration tests, then the
# real-client tests (the unmodified weave SDK against a real `heddle serve`).
#
# Slow installs are kept in a cache directory that is checked first and rebuilt when missing:
#   HEDDLE_TEST_CACHE   (default: ~/.cache/heddle-test)
# CLICKHOUSE_URL points the ClickHouse tests at a real server instead of chdb. The HTTP and
# real-client suites run three times: on SQLite, with HEDDLE_TEST_STORE=clickhouse, and with
# HEDDLE_TEST_STORE=distributed (calls through a tansu broker into ClickHouse).
set -euo pipefail
cd "$(dirname "$0")/.."

cache="${HEDDLE_TEST_CACHE:-$HOME/.cache/heddle-test}"
venv="$cache/venv-$(sha256sum tests/python/requirements.txt | cut -c1-12)"

step() { printf '\n==> %s\n' "$*"; }

# rdkafka builds its bundled librdkafka with cmake (Debian's librdkafka is too old for tansu);
# the UI's browser tests (tests/python/test_ui_browser.py) drive Debian's Chromium through its
# chromedriver, with an emoji font for the screenshots.
missing=()
for pkg in cmake libcurl4-openssl-dev libssl-dev zlib1g-dev chromium chromium-driver \
    fonts-noto-color-emoji; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    step "installing build packages: ${missing[*]}"
    sudo_=""; [ "$(id -u)" -eq 0 ] || sudo_="sudo"
    $sudo_ apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# tansu: a real Kafka-protocol broker for the distributed tests (a slow build, so cached).
tansu_root="$cache/tansu-0.6.0"
if [ ! -x "$tansu_root/bin/tansu" ]; then
    step "installing tansu 0.6.0 into $tansu_root (about 15 minutes, once)"
    cargo install tansu@0.6.0 --locked --features libsql --root "$tansu_root"
fi
export HEDDLE_TANSU="$tansu_root/bin/tansu"

venv_probe='import weave, pytest, chdb, mmdb_writer, selenium, opentelemetry.exporter.otlp.proto.grpc.trace_exporter'
if ! "$venv/bin/python" -c "$venv_probe" >/dev/null 2>&1; then
    step "creating the Python venv with the pinned SDK in $venv"
    rm -rf "$venv"
    mkdir -p "$cache"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r tests/python/requirements.txt
fi

step "building"
cargo build --workspace --bins
# The embedded-only build must not need the ClickHouse client or librdkafka (README, "Build
# features"): check both that it builds and that neither crate is in its dependency tree.
cargo build --no-default-features --features sqlite --bin heddle
if cargo tree --no-default-features --features sqlite -e normal -p heddle | grep -E '^.* (rdkafka|clickhouse) v'; then
    echo "the sqlite-only build depends on ClickHouse or Kafka" >&2
    exit 1
fi

step "Rust tests"
# The Python with chdb, for the tests' ClickHouse (tests/support/clickhouse_http.py).
export HEDDLE_TEST_PYTHON="$venv/bin/python"
cargo test --workspace
# (cargo test --workspace runs tests/ql_conformance.rs and tests/clickhouse_store.rs: the query
# language's conformance table through the evaluator, SQLite and ClickHouse.)

step "HTTP conformance tests on the ClickHouse store"
# The same suites, every server on its own ClickHouse (chdb, or CLICKHOUSE_URL's server).
HEDDLE_TEST_STORE=clickhouse cargo test --test http_calls --test http_objects_files \
    --test http_objects_query --test http_tables_refs --test http_expand --test http_otlp --test http_otlp_logs \
    --test http_feedback --test http_costs_threads --test http_service_auth --test restart \
    --test adversarial_input --test keys --test large_calls --test http_tags_aliases \
    --test http_annotation_queues --test http_agents --test http_usage_stats --test project_settings

step "HTTP conformance tests on the distributed store (Kafka + ClickHouse)"
# Every server gets its own tansu broker and ClickHouse and runs `serve --kafka --clickhouse`;
# clients wait after each acknowledged ingest request until the consumer has stored it.
HEDDLE_TEST_STORE=distributed cargo test --test http_calls --test http_objects_files \
    --test http_objects_query --test http_tables_refs --test http_expand --test http_otlp --test http_otlp_logs \
    --test http_feedback --test http_costs_threads --test http_service_auth --test restart \
    --test adversarial_input --test keys --test large_calls --test http_tags_aliases \
    --test http_annotation_queues --test http_agents --test http_usage_stats --test project_settings

step "real-client tests (weave SDK)"
HEDDLE_BIN="$PWD/target/debug/heddle" "$venv/bin/python" -m pytest tests/python -q -p no:cacheprovider

step "real-client tests (weave SDK) on the ClickHouse store"
HEDDLE_TEST_STORE=clickhouse HEDDLE_BIN="$PWD/target/debug/heddle" \
    "$venv/bin/python" -m pytest tests/python -q -p no:cacheprovider

step "real-client tests (weave SDK) on the distributed store (Kafka + ClickHouse)"
HEDDLE_TEST_STORE=distributed HEDDLE_BIN="$PWD/target/debug/heddle" \
    "$venv/bin/python" -m pytest tests/python -q -p no:cacheprovider
