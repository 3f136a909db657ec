"""Page times of the web UI (docs/benchmarks.md, "Web UI"): server time (request to last byte,
over HTTP with a session cookie) and, in headless Chromium, time to first contentful paint and
to the load event, for the calls table's first page, a filtered page, and a call in a large trace.

Seed a project first with heddle-bench (docs/benchmarks.md), e.g. 1M calls and one 10,000-call
trace:

    heddle-bench --url URL --api-key KEY --project bench/ui1m --calls 1000000 \\
        --baseline-calls 0 --health-requests 0
    heddle-bench --url URL --api-key KEY --project bench/ui1m-trace --calls 10000 \\
        --children 9999 --baseline-calls 0 --health-requests 0

then run with the test venv's Python (it has selenium and requests):

    python bench/ui_pages.py --url URL --api-key KEY --project bench/ui1m \\
        --trace-project bench/ui1m-trace
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time

import requests
from selenium import webdriver
from selenium.webdriver.chrome.service import Service


def sign_in(url: str, key: str) -> str:
    r = requests.post(f"{url}/signin", data={"key": key, "next": "/"}, allow_redirects=False, timeout=30)
    assert r.status_code == 303, r.text
    return r.cookies["heddle_session"]


def first_call(url: str, key: str, project: str) -> str:
    body = {"project_id": project, "filter": {"trace_roots_only": True}, "limit": 1}
    r = requests.post(f"{url}/calls/stream_query", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=60)
    return json.loads(r.text.splitlines()[0])["id"]


def server_times(url: str, cookie: str, path: str, n: int) -> list[float]:
    s = requests.Session()
    s.cookies.set("heddle_session", cookie)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = s.get(url + path, timeout=120)
        out.append((time.perf_counter() - t) * 1000)
        assert r.status_code == 200, (path, r.status_code)
    return out


# Chromium may paint after the load event that `driver.get` waits for, so the paint entry is
# awaited (buffered: an earlier paint is reported at once), for at most PAINT_WAIT_MS.
PAINT_WAIT_MS = 10_000
FIRST_PAINT = f"""
const done = arguments[arguments.length - 1];
const finish = (fcp) => {{
  const nav = performance.getEntriesByType('navigation')[0];
  done([fcp, nav ? nav.loadEventEnd : null]);
}};
new PerformanceObserver((list, observer) => {{
  const e = list.getEntriesByName('first-contentful-paint')[0];
  if (e) {{ observer.disconnect(); finish(e.startTime); }}
}}).observe({{type: 'paint', buffered: true}});
setTimeout(() => finish(null), {PAINT_WAIT_MS});
"""


def browser_times(driver: webdriver.Chrome, url: str, path: str, n: int) -> tuple[list[float], list[float]]:
    driver.set_script_timeout(PAINT_WAIT_MS / 1000 + 5)
    fcp, load = [], []
    for _ in range(n):
        driver.get(url + path)
        assert driver.current_url == url + path, f"{path} led to {driver.current_url} (signed out?)"
        paint, loaded = driver.execute_async_script(FIRST_PAINT)
        assert paint is not None, f"{path}: no first contentful paint within {PAINT_WAIT_MS} ms"
        fcp.append(paint)
        load.append(loaded)
    return fcp, load


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--api-key", required=True)
    ap.add_argument("--project", required=True)
    ap.add_argument("--trace-project", required=True)
    ap.add_argument("--runs", type=int, default=10)
    a = ap.parse_args()
    e, p = a.project.split("/")
    te, tp = a.trace_project.split("/")
    trace_root = first_call(a.url, a.api_key, a.trace_project)
    pages = {
        "calls table, first page": f"/{e}/{p}/weave/calls",
        "calls table, filtered (status=error, all calls)": f"/{e}/{p}/weave/calls?status=error&all=1",
        "calls table, page 100": f"/{e}/{p}/weave/calls?offset=4950",
        "project overview": f"/{e}/{p}/weave",
        "trace of 10,000 calls (root selected)": f"/{te}/{tp}/r/call/{trace_root}",
    }
    cookie = sign_in(a.url, a.api_key)
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        opts.add_argument(arg)
    driver = webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"))
    try:
        driver.get(a.url + "/signin")
        driver.add_cookie({"name": "heddle_session", "value": cookie, "path": "/"})
        print("| Page | server p50 ms | server p90 ms | first paint p50 ms | load p50 ms |")
        print("|---|---:|---:|---:|---:|")
        for name, path in pages.items():
            server_times(a.url, cookie, path, 1)  # warm the caches once
            st = sorted(server_times(a.url, cookie, path, a.runs))
            fcp, load = browser_times(driver, a.url, path, max(3, a.runs // 2))
            p90 = st[min(len(st) - 1, int(len(st) * 0.9))]
            print(f"| {name} | {statistics.median(st):.0f} | {p90:.0f} | "
                  f"{statistics.median(fcp):.0f} | {statistics.median(load):.0f} |", flush=True)  # fmt: skip
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
