"""The web UI in a real browser: Debian's Chromium driven by Selenium (chromedriver), against
`heddle serve` seeded by the real weave SDK (nested ops, an exception, LLM-shaped calls with
usage, an evaluation with a dataset, feedback, threads) and by the OpenTelemetry SDK's OTLP
exporter. The tests sign in like a user, open the link the SDK printed, follow links between
the views and check that each shows the seeded data; entity keys, revocation, CSRF and sign-out
are checked from the browser's side too. Screenshots go to $HEDDLE_UI_SCREENSHOTS (default
<repo>/target/ui-screenshots) for a person to look at.

Semantics only: no timings here (the page benchmark is bench/ui_pages.py, docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlparse

import pytest
import requests

from heddle_support import (  # isort: skip  (sets the SDK env before weave is imported)
    REPO_ROOT,
    HeddleServer,
    basic_auth,
    eventually,
    fast_batching,
    flush,
)
import weave  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import NoSuchElementException, WebDriverException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402
from weave.trace.context import weave_client_context  # noqa: E402

ENTITY = "acme"
SHOTS = Path(os.environ.get("HEDDLE_UI_SCREENSHOTS") or REPO_ROOT / "target" / "ui-screenshots")


# ---------------------------------------------------------------------------------------------
# What the SDK writes
# ---------------------------------------------------------------------------------------------
@weave.op()
def tokenize(text: str) -> list[str]:
    return text.lower().split()


@weave.op()
def retrieve(question: str) -> list[str]:
    return [f"doc about {w}" for w in tokenize(question)[:2]]


@weave.op()
def chat_model(messages: list[dict[str, str]], model: str) -> dict[str, Any]:
    """An OpenAI-like chat completion: the SDK turns `usage` into summary.usage[model]."""
    return {
        "model": model,
        "choices": [{"message": {"role": "assistant", "content": "Paris is the capital."}}],
        "usage": {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500},
    }


@weave.op()
def answer(question: str) -> dict[str, Any]:
    docs = retrieve(question)
    messages = [
        {"role": "system", "content": "Answer briefly."},
        {"role": "user", "content": question},
    ]
    reply = chat_model(messages, model="gpt-4o-mini")
    return {"answer": reply["choices"][0]["message"]["content"], "docs": docs}


@weave.op()
def flaky_tool(x: int) -> int:
    raise ValueError(f"flaky tool refused {x}")


class CalculatorModel(weave.Model):
    offset: int = 0

    @weave.op()
    def predict(self, question: str) -> dict[str, Any]:
        return {"answer": str(int(eval(question, {"__builtins__": {}})) + self.offset)}


@weave.op()
def exact_match(expected: str, output: dict[str, Any]) -> dict[str, Any]:
    return {"correct": output["answer"] == expected}


ROWS = [
    {"question": "1+1", "expected": "2"},
    {"question": "2*3", "expected": "6"},
    {"question": "10-7", "expected": "4"},  # a miss for the exact model
]


class Site:
    """The seeded project and what the SDK told about it."""

    def __init__(self, server: HeddleServer, project: str) -> None:
        self.server = server
        self.project = project
        self.pid = f"{ENTITY}/{project}"
        self.base = f"{server.url}/{ENTITY}/{project}/weave"
        self.sdk_links: list[str] = []
        self.home_link = ""
        self.answer_id = ""
        self.error_id = ""
        self.eval_ids: list[str] = []
        self.otel_trace = ""
        self.alice_key = ""
        self.alice_project = ""


def _seed(server: HeddleServer, caplog: pytest.LogCaptureFixture) -> Site:
    site = Site(server, f"ui-{uuid.uuid4().hex[:8]}")
    if weave_client_context.get_weave_client() is not None:
        weave.finish()
    os.environ["WEAVE_PRINT_CALL_LINK"] = "true"
    caplog.set_level(logging.INFO, logger="weave")
    try:
        client = weave.init(site.pid)
        fast_batching(client)
        res, call = answer.call("What is the capital of France?")
        site.answer_id = call.id
        call.feedback.add_reaction("👍")
        call.feedback.add_note("checked by hand")
        try:
            flaky_tool(7)
        except ValueError:
            pass
        with weave.thread("support-chat"):
            answer("Where is the Louvre?")
            answer("And the Eiffel tower?")
        dataset = weave.Dataset(name="arith", rows=ROWS)
        evaluation = weave.Evaluation(name="arith-eval", dataset=dataset, scorers=[exact_match])
        asyncio.run(evaluation.evaluate(CalculatorModel(name="calc")))
        asyncio.run(evaluation.evaluate(CalculatorModel(name="calc-off-by-one", offset=1)))
        flush(client)
    finally:
        os.environ["WEAVE_PRINT_CALL_LINK"] = "false"
    for r in caplog.records:
        msg = r.getMessage()
        if msg.startswith("🍩 "):
            site.sdk_links.append(msg.split(" ", 1)[1].strip())
        m = re.search(r"View Weave data at (\S+)", msg)
        if m:
            site.home_link = m.group(1)
    calls = server.stream_calls(site.pid)
    site.error_id = next(c["id"] for c in calls if "flaky_tool" in c["op_name"])
    site.eval_ids = [c["id"] for c in calls if "Evaluation.evaluate" in c["op_name"]]
    weave.finish()

    # OpenTelemetry spans: a root with a GenAI chat child, exported over OTLP/HTTP.
    exporter = OTLPSpanExporter(
        endpoint=f"{server.url}/otel/v1/traces",
        headers={"Authorization": basic_auth(server.api_key), "project_id": site.pid},
    )
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("ui-test")
    with tracer.start_as_current_span("otel agent run") as root:
        with tracer.start_as_current_span(
            "chat gpt-4o",
            attributes={
                "gen_ai.system": "openai",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.usage.input_tokens": 21,
                "gen_ai.usage.output_tokens": 3,
                "gen_ai.input.messages": json.dumps(
                    [{"role": "user", "parts": [{"type": "text", "content": "otel question?"}]}]
                ),
                "gen_ai.output.messages": json.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": "otel answer"}]}]
                ),
            },
        ):
            pass
        site.otel_trace = format(root.get_span_context().trace_id, "032x")
    provider.shutdown()
    server.wait_visible()

    site.alice_key = server.create_key("alice")
    site.alice_project = f"alice/own-{uuid.uuid4().hex[:6]}"
    server.post_ok(
        "/call/start",
        {"start": {"project_id": site.alice_project, "id": "alice-call-1", "op_name": "alice_op",
                   "started_at": "2026-01-01T00:00:00Z", "inputs": {"x": 1}, "attributes": {}}},
        key=site.alice_key,
    )  # fmt: skip
    return site


@pytest.fixture(scope="module")
def site(server: HeddleServer) -> Iterator[Site]:
    # caplog is function-scoped; a module-scoped seed captures the SDK's log itself.
    handler = _ListHandler()
    logger = logging.getLogger("weave")
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.INFO)
    try:
        yield _seed(server, handler)  # type: ignore[arg-type]
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)


class _ListHandler(logging.Handler):
    """Keeps log records, with the one method of pytest's caplog that _seed uses."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def set_level(self, level: int, logger: str) -> None:
        logging.getLogger(logger).setLevel(level)


# ---------------------------------------------------------------------------------------------
# The browser
# ---------------------------------------------------------------------------------------------
def chromium_driver() -> webdriver.Chrome:
    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1400,1000", "--lang=en-US"):  # fmt: skip
        opts.add_argument(arg)
    service = Service(executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver")
    return webdriver.Chrome(options=opts, service=service)


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    driver = chromium_driver()
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver: webdriver.Chrome, name: str, full: bool = True) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    if full:
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1400, min(max(int(height), 600), 4000))
    driver.save_screenshot(str(SHOTS / f"{name}.png"))
    if full:
        driver.set_window_size(1400, 1000)


def sign_in(driver: webdriver.Chrome, site: Site, key: str | None = None, path: str = "/") -> None:
    driver.get(site.server.url + path)
    _loaded(driver)
    assert urlparse(driver.current_url).path == "/signin", driver.current_url
    driver.find_element(By.ID, "key").send_keys(key or site.server.api_key)
    click(driver.find_element(By.CSS_SELECTOR, "form.signin button[type=submit]"))


def click(element: Any) -> None:
    """Clicks something that loads a new page, and waits until the new page has loaded."""
    driver = element.parent
    _loaded(driver)
    old = driver.find_element(By.TAG_NAME, "html")
    element.click()
    WebDriverWait(driver, 30).until(lambda _: _gone(old))
    _loaded(driver)


def _gone(element: Any) -> bool:
    """Whether `element` left the document. chromedriver sometimes says so with an "unknown
    error" (the node "does not belong to the document") instead of a stale-element error."""
    try:
        return expected_conditions.staleness_of(element)(None)
    except WebDriverException as e:
        if "does not belong to the document" in str(e):
            return True
        raise


def _loaded(driver: webdriver.Chrome) -> None:
    WebDriverWait(driver, 30).until(
        lambda d: d.execute_script("return document.readyState") == "complete"
    )


def text(driver: webdriver.Chrome) -> str:
    return driver.find_element(By.TAG_NAME, "main").text


def link(driver: webdriver.Chrome, label: str) -> Any:
    return driver.find_element(By.LINK_TEXT, label)


def path_of(driver: webdriver.Chrome) -> str:
    return urlparse(driver.current_url).path


def status_of(site: Site, path: str, cookies: dict[str, str]) -> int:
    return requests.get(site.server.url + path, cookies=cookies, allow_redirects=False, timeout=30).status_code


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------
def test_sign_in_goes_back_to_the_page_asked_for(site: Site, browser: webdriver.Chrome) -> None:
    target = f"/{ENTITY}/{site.project}/weave/calls?status=error"
    browser.get(site.server.url + target)
    _loaded(browser)
    assert path_of(browser) == "/signin"
    assert parse_qs(urlparse(browser.current_url).query)["next"] == [target]
    shot(browser, "01-signin", full=False)
    browser.find_element(By.ID, "key").send_keys("not-a-key")
    click(browser.find_element(By.CSS_SELECTOR, "form.signin button[type=submit]"))
    assert "not valid" in text(browser)
    browser.find_element(By.ID, "key").send_keys(site.server.api_key)
    click(browser.find_element(By.CSS_SELECTOR, "form.signin button[type=submit]"))
    assert browser.current_url == site.server.url + target

    (cookie,) = [c for c in browser.get_cookies() if c["name"] == "heddle_session"]
    assert cookie["httpOnly"] is True and cookie["sameSite"] == "Lax", cookie
    assert cookie["secure"] is False  # plain HTTP on loopback
    # The key never shows: not in the cookie, the URL or the page.
    assert site.server.api_key not in cookie["value"]
    assert site.server.api_key not in browser.current_url
    assert site.server.api_key not in browser.page_source

    # A `next` that leaves the site is not followed.
    browser.delete_all_cookies()
    browser.get(site.server.url + "/signin?next=//evil.example/x")
    _loaded(browser)
    browser.find_element(By.ID, "key").send_keys(site.server.api_key)
    click(browser.find_element(By.CSS_SELECTOR, "form.signin button[type=submit]"))
    assert browser.current_url == site.server.url + "/", browser.current_url


def test_the_sdk_links_open_the_project_and_the_call(site: Site, browser: webdriver.Chrome) -> None:
    assert site.home_link == site.base, (site.home_link, site.base)
    assert len(site.sdk_links) >= 5, site.sdk_links
    answer_link = f"{site.server.url}/{ENTITY}/{site.project}/r/call/{site.answer_id}"
    assert answer_link in site.sdk_links, site.sdk_links

    sign_in(browser, site, path=urlparse(answer_link).path)
    assert browser.current_url == answer_link
    main = text(browser)
    assert "What is the capital of France?" in main
    # The trace's tree: the root and its nested ops, with the root selected.
    rows = browser.find_elements(By.CSS_SELECTOR, ".tree-rows li")
    names = [r.find_element(By.CSS_SELECTOR, ".name").text for r in rows]
    assert names[0].startswith("answer"), names
    for op in ("retrieve", "tokenize", "chat_model"):
        assert any(n.startswith(op) for n in names), (op, names)
    depth = {n.split()[0]: r.get_attribute("style") for n, r in zip(names, rows)}
    assert "--depth: 2" in depth["tokenize"], depth  # answer › retrieve › tokenize
    # Output, usage and cost, feedback from the SDK.
    assert "Paris is the capital." in main
    assert "gpt-4o-mini" in main and "1,500" in main
    assert "👍" in main and "checked by hand" in main
    shot(browser, "02-trace")

    # The chat view of the LLM call.
    click(next(r for n, r in zip(names, rows) if n.startswith("chat_model")).find_element(By.TAG_NAME, "a"))
    chat = browser.find_elements(By.CSS_SELECTOR, "ol.chat li")
    roles = [m.find_element(By.CSS_SELECTOR, ".role").text.lower() for m in chat]
    assert roles[:2] == ["system", "user"] and "assistant" in roles, roles
    assert "Answer briefly." in chat[0].text
    # Its op's version page, with the op's code from the stored file.
    click(browser.find_element(By.CSS_SELECTOR, "dl.meta a"))
    assert re.search(r"/weave/ops/chat_model/versions/[^/]+$", path_of(browser))
    assert "def chat_model" in text(browser)
    shot(browser, "03-op-version")

    browser.get(site.home_link)
    assert path_of(browser) == f"/{ENTITY}/{site.project}/weave"


def test_calls_table_filters_sorts_and_pages(site: Site, browser: webdriver.Chrome) -> None:
    sign_in(browser, site, path=f"/{ENTITY}/{site.project}/weave/calls")
    rows = browser.find_elements(By.CSS_SELECTOR, "table.calls tbody tr")
    ops = [r.find_elements(By.TAG_NAME, "td")[0].text for r in rows]
    # Root calls only by default: no tokenize/retrieve/chat_model.
    assert "answer" in ops and "flaky_tool" in ops and "Evaluation.evaluate" in ops, ops
    assert not {"tokenize", "retrieve", "chat_model"} & set(ops), ops
    first = rows[0].find_elements(By.TAG_NAME, "td")
    assert first[3].text >= rows[-1].find_elements(By.TAG_NAME, "td")[3].text  # newest first
    shot(browser, "04-calls")

    # Filter by status (select + submit): only the failing call.
    browser.find_element(By.CSS_SELECTOR, "#f-status option[value=error]").click()
    click(browser.find_element(By.CSS_SELECTOR, "form.filters button[type=submit]"))
    rows = browser.find_elements(By.CSS_SELECTOR, "table.calls tbody tr")
    assert [r.find_elements(By.TAG_NAME, "td")[0].text for r in rows] == ["flaky_tool"]
    click(rows[0].find_element(By.CSS_SELECTOR, "td:nth-child(2) a"))
    assert path_of(browser).endswith(f"/r/call/{site.error_id}")
    exc = browser.find_element(By.CSS_SELECTOR, "section.exception").text
    assert "ValueError" in exc and "flaky tool refused 7" in exc, exc
    assert "Traceback" in exc or "line" in exc, exc
    shot(browser, "05-exception")

    base = f"/{ENTITY}/{site.project}/weave/calls"
    # By op, all calls (children too), and by text in inputs.
    browser.get(site.server.url + base + "?op=tokenize&all=1")
    ops = [r.find_elements(By.TAG_NAME, "td")[0].text
           for r in browser.find_elements(By.CSS_SELECTOR, "table.calls tbody tr")]  # fmt: skip
    assert ops and set(ops) == {"tokenize"}, ops
    browser.get(site.server.url + base + "?q=louvre")
    names = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "table.calls tbody tr")]
    assert len(names) == 1 and "answer" in names[0], names
    # The query language, as /calls/stream_query takes it.
    expr = json.dumps({"$eq": [{"$getField": "inputs.question"}, {"$literal": "And the Eiffel tower?"}]})
    browser.get(site.server.url + base + "?expr=" + quote(expr))
    assert len(browser.find_elements(By.CSS_SELECTOR, "table.calls tbody tr")) == 1
    # A query the language refuses is a 400 page, not a 500.
    assert status_of(site, base + "?expr=" + quote('{"$nope": 1}'), session(browser)) == 400
    # Sort by latency, ascending then descending: the column link toggles.
    browser.get(site.server.url + base)
    click(browser.find_element(By.LINK_TEXT, "Latency"))
    assert parse_qs(urlparse(browser.current_url).query)["dir"] == ["desc"]
    click(browser.find_element(By.PARTIAL_LINK_TEXT, "Latency"))
    assert parse_qs(urlparse(browser.current_url).query)["dir"] == ["asc"]


def session(driver: webdriver.Chrome) -> dict[str, str]:
    return {c["name"]: c["value"] for c in driver.get_cookies()}


def test_notes_and_reactions_from_the_trace_view(site: Site, browser: webdriver.Chrome) -> None:
    call_path = f"/{ENTITY}/{site.project}/r/call/{site.answer_id}"
    sign_in(browser, site, path=call_path)
    browser.find_element(By.ID, "note").send_keys("seen in the browser")
    click(browser.find_element(By.CSS_SELECTOR, "form.note button[type=submit]"))
    click(browser.find_element(By.CSS_SELECTOR, "form.reactions button[value='🎉']"))
    # Read back through the API, as the SDK would see it.
    ref = f"weave:///{site.pid}/call/{site.answer_id}"
    q = {"project_id": site.pid, "query": {"$expr": {"$eq": [{"$getField": "weave_ref"}, {"$literal": ref}]}}}
    rows = site.server.post_ok("/feedback/query", q)["result"]
    payloads = {r["feedback_type"]: [] for r in rows}
    for r in rows:
        payloads[r["feedback_type"]].append(r["payload"])
    assert {"note": "seen in the browser"} in payloads["wandb.note.1"], payloads
    assert {"emoji": "🎉"} in payloads["wandb.reaction.1"], payloads
    shot(browser, "06-feedback")

    # Remove the note again.
    items = browser.find_elements(By.CSS_SELECTOR, "ul.feedback li")
    mine = next(i for i in items if "seen in the browser" in i.text)
    click(mine.find_element(By.CSS_SELECTOR, "button"))
    rows = site.server.post_ok("/feedback/query", q)["result"]
    assert not any(r["payload"].get("note") == "seen in the browser" for r in rows), rows

    # CSRF: the same form without the session's token, or from another origin, changes nothing.
    cookies = session(browser)
    url = site.server.url + call_path + "/feedback"
    for headers, token in (({}, "forged"), ({"Origin": "http://evil.example"}, None)):
        form = {"kind": "note", "note": "forged", "csrf": token or _csrf(browser)}
        r = requests.post(url, data=form, cookies=cookies, headers=headers, allow_redirects=False, timeout=30)
        assert r.status_code == 403, r.text
    rows = site.server.post_ok("/feedback/query", q)["result"]
    assert not any(r["payload"].get("note") == "forged" for r in rows)


def _csrf(driver: webdriver.Chrome) -> str:
    return driver.find_element(By.CSS_SELECTOR, "form.signout input[name=csrf]").get_attribute("value")


def test_objects_and_the_dataset(site: Site, browser: webdriver.Chrome) -> None:
    sign_in(browser, site, path=f"/{ENTITY}/{site.project}/weave/objects")
    main = text(browser)
    assert "arith" in main and "arith-eval" in main and "calc" in main, main
    shot(browser, "07-objects")
    click(link(browser, "arith"))
    assert re.search(r"/weave/objects/arith/versions/[^/]+$", path_of(browser))
    cells = [td.text for td in browser.find_elements(By.CSS_SELECTOR, "table.rows td")]
    for row in ROWS:
        assert row["question"] in cells and row["expected"] in cells, cells
    shot(browser, "08-dataset")
    browser.get(f"{site.base}/ops")
    main = text(browser)
    for op in ("answer", "tokenize", "flaky_tool", "Evaluation.evaluate"):
        assert op in main, (op, main)


def test_evaluations_list_detail_and_compare(site: Site, browser: webdriver.Chrome) -> None:
    sign_in(browser, site, path=f"/{ENTITY}/{site.project}/weave/evaluations")
    rows = browser.find_elements(By.CSS_SELECTOR, "table.evals tbody tr")
    assert len(rows) == 2, [r.text for r in rows]
    joined = " ".join(r.text for r in rows)
    assert "calc" in joined and "calc-off-by-one" in joined and "arith" in joined, joined
    shot(browser, "09-evaluations")
    click(rows[0].find_element(By.CSS_SELECTOR, "a"))
    main = text(browser)
    assert "exact_match" in main and "correct" in main, main
    for row in ROWS:
        assert row["question"] in main, main
    shot(browser, "10-evaluation")
    browser.get(f"{site.base}/evaluations/compare?a={site.eval_ids[0]}&b={site.eval_ids[1]}")
    main = text(browser)
    assert "calc-off-by-one" in main and "10-7" in main, main
    shot(browser, "11-compare")


def test_threads_as_a_conversation(site: Site, browser: webdriver.Chrome) -> None:
    sign_in(browser, site, path=f"/{ENTITY}/{site.project}/weave/threads")
    assert "support-chat" in text(browser)
    click(link(browser, "support-chat"))
    turns = browser.find_elements(By.CSS_SELECTOR, "ol.turns > li")
    assert len(turns) == 2, [t.text for t in turns]
    assert "Where is the Louvre?" in turns[0].text and "Eiffel" in turns[1].text
    shot(browser, "12-thread")


def test_otel_spans_show_as_a_trace_with_a_chat(site: Site, browser: webdriver.Chrome) -> None:
    rows = site.server.stream_calls(site.pid, filter={"trace_ids": [site.otel_trace]})
    # Each span name is an op (lower case, spaces as `_`: docs/otlp.md, "Ops").
    chat = next(r for r in rows if "/op/chat_gpt-4o:" in r["op_name"])
    sign_in(browser, site, path=f"/{ENTITY}/{site.project}/r/call/{chat['id']}")
    names = [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".tree-rows .name")]
    assert any("otel agent run" in n or "otel_agent_run" in n for n in names), names
    msgs = [m.text for m in browser.find_elements(By.CSS_SELECTOR, "ol.chat li")]
    assert any("otel question?" in m for m in msgs) and any("otel answer" in m for m in msgs), msgs
    shot(browser, "13-otel")


def test_overview_and_projects(site: Site, browser: webdriver.Chrome) -> None:
    sign_in(browser, site, path=f"/{ENTITY}/{site.project}/weave")
    main = text(browser)
    assert "Calls" in main and "Errors" in main, main
    assert browser.find_elements(By.CSS_SELECTOR, "svg.chart"), "charts"
    shot(browser, "14-overview")
    browser.get(site.server.url + "/")
    assert site.pid in text(browser)
    shot(browser, "15-projects")
    click(link(browser, site.pid))
    assert path_of(browser) == f"/{ENTITY}/{site.project}/weave"


def test_an_entity_key_sees_only_its_entity(site: Site, browser: webdriver.Chrome) -> None:
    e, p = site.alice_project.split("/")
    sign_in(browser, site, key=site.alice_key, path=f"/{e}/{p}/weave/calls")
    assert "alice_op" in text(browser)
    browser.get(f"{site.base}/calls")
    assert "403" in browser.find_element(By.TAG_NAME, "h1").text
    assert site.answer_id not in browser.page_source
    browser.get(f"{site.server.url}/{ENTITY}/{site.project}/r/call/{site.answer_id}")
    assert "403" in browser.find_element(By.TAG_NAME, "h1").text
    assert "capital of France" not in browser.page_source
    browser.get(site.server.url + "/")
    assert site.alice_project in text(browser) and site.pid not in text(browser)


def test_sign_out_and_revocation_end_sessions(site: Site, browser: webdriver.Chrome) -> None:
    key = site.server.create_key("bob")
    target = "/bob/x/weave/calls"
    sign_in(browser, site, key=key, path=target)
    assert path_of(browser) == target
    cookies = session(browser)
    # Sign out: the browser's cookie is gone.
    click(browser.find_element(By.CSS_SELECTOR, "form.signout button"))
    assert path_of(browser) == "/signin"
    browser.get(site.server.url + target)
    assert path_of(browser) == "/signin"
    # Revoke the key: the old session (replayed) stops working within the key cache's TTL.
    assert status_of(site, target, cookies) == 200
    out = subprocess.run(
        [str(site.server.binary), "keys", "list", *site.server.store_args()],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    key_id = next(line.split()[0] for line in reversed(out.stdout.splitlines()) if '"bob"' in line)
    subprocess.run(
        [str(site.server.binary), "keys", "revoke", key_id, *site.server.store_args()],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip

    def ended() -> None:
        assert status_of(site, target, cookies) == 303

    eventually(ended, timeout=15, interval=0.5)
