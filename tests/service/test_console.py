"""The analyzer's operator console, in a real browser: Debian's Chromium, headless, driven by Playwright, reads
what the pages show (the task list, a released task's chart and privacy statement, a waiting task)."""

import os
from contextlib import contextmanager

import numpy as np
import pytest
from fastapi.testclient import TestClient

from privagg.protocols.registry import calibrate
from privagg.service.shuffle.analyzer import create_app
from privagg.service.shuffle.console import Z95
from service_deployment import deploy, served, users

CHROMIUM = "/usr/bin/chromium"  # Debian's package (`make test` installs it where apt-get can)
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run"]


@contextmanager
def browser():
    from playwright.sync_api import sync_playwright

    if not os.path.exists(CHROMIUM):
        pytest.fail(f"the console's test needs Debian's Chromium at {CHROMIUM}: apt-get install chromium")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield chromium.new_page(viewport={"width": 1100, "height": 900})
        finally:
            chromium.close()


def test_the_console_shows_tasks_results_with_intervals_and_the_guarantee(tmp_path):
    params = calibrate("fe1", epsilon=1.0, delta=1e-6, n_users=400, domain_size=30)
    d = deploy({role: f"sqlite:///{tmp_path}/{role}.db" for role in ("collector", "analyzer")}, params)
    reports, _ = users(d, np.random.default_rng(2).zipf(1.5, 400) % 30, np.random.default_rng(3))
    d.store(reports)
    d.collector.release_batches()
    waiting = d.analyzer.create_task(params)
    result = d.analyzer.result(d.task.task_id, top=20)
    expected = result["estimates"][:20]

    with served(create_app(d.analyzer)) as url, browser() as page:
        page.goto(f"{url}/console")
        rows = page.locator("#tasks tbody tr")
        assert rows.count() == 2
        listed = {r.locator("td").nth(0).inner_text(): r.inner_text() for r in rows.all()}
        released = listed[d.task.task_id]  # the whole id, as privagg task close and result take it
        assert "fe1" in released and "400 / 400" in released and "released" in released
        assert "waiting for its batch" in listed[waiting.task_id]

        page.click(f"text={d.task.task_id}")
        page.wait_for_selector("#chart")
        assert page.locator("#state").inner_text() == "released"
        bars = page.locator("#chart rect.bar")
        assert bars.count() == len(expected) and page.locator("#chart line.interval").count() == len(expected)
        labels = page.locator("#chart text").all_text_contents()
        for row in expected:  # each estimate and its 95% interval's half-width, as drawn
            assert f"{row['estimate']:,.1f} ± {Z95 * row['stderr']:,.1f}" in labels
        widths = [float(b.get_attribute("width")) for b in bars.all()]
        top = max(range(len(expected)), key=lambda i: abs(expected[i]["estimate"]))
        assert widths[top] == max(widths) > 0  # the longest bar is the largest estimate
        privacy = page.locator("#privacy").inner_text()
        assert f"({result['privacy']['epsilon']:g}, {result['privacy']['delta']:.2g})-differentially private" in privacy
        assert "shuffle model" in privacy and "400 users" in privacy
        text = page.locator("body").inner_text().lower()
        assert "true count" not in text and "true_count" not in text
        shot = os.environ.get("PRIVAGG_CONSOLE_SCREENSHOT", str(tmp_path / "console.png"))  # make bench: the docs'
        page.screenshot(path=shot, full_page=True)
        assert os.path.getsize(shot) > 10_000

        page.goto(f"{url}/console/tasks/{waiting.task_id}")
        assert "No result yet" in page.locator("#waiting").inner_text()
        assert page.locator("#chart").count() == 0


def test_a_weak_guarantee_is_said_weak_on_the_console_with_its_warnings(tmp_path):
    """A reviewer's finding: a task at (1, 0.5) read "This result is (1, 0.5)-differentially private" with no
    warning. The page now says "only weakly private" and lists the result's warnings (checked in a browser)."""
    params = calibrate("fe1", epsilon=1.0, delta=0.5, n_users=400, domain_size=30)
    d = deploy({role: f"sqlite:///{tmp_path}/{role}.db" for role in ("collector", "analyzer")}, params)
    reports, _ = users(d, np.random.default_rng(2).zipf(1.5, 400) % 30, np.random.default_rng(3))
    d.store(reports)
    d.collector.release_batches()
    with served(create_app(d.analyzer)) as url, browser() as page:
        page.goto(f"{url}/console/tasks/{d.task.task_id}")
        page.wait_for_selector("#privacy")
        assert page.locator("#privacy p").first.inner_text().startswith("This result is only weakly private (see "
                                                                          "the warnings): (1, 0.5)-differentially")
        assert "delta = 0.5 is at least 1/n = 0.0025" in page.locator("#warnings").inner_text()


def test_the_console_and_the_task_list_ask_for_the_result_token(tmp_path):
    params = calibrate("grr", epsilon=1.0, n_users=20, domain_size=4)
    d = deploy({role: f"sqlite:///{tmp_path}/{role}.db" for role in ("collector", "analyzer")}, params)
    app = TestClient(create_app(d.analyzer, result_token="t" * 32))
    for path in ("/tasks", "/console", f"/console/tasks/{d.task.task_id}"):
        assert app.get(path).status_code == 401
        assert app.get(path, headers={"authorization": "Bearer " + "t" * 32}).status_code == 200
    listed = app.get("/tasks", headers={"authorization": "Bearer " + "t" * 32}).json()["tasks"]
    assert [t["task_id"] for t in listed] == [d.task.task_id] and listed[0]["state"] == "waiting for its batch"
    assert app.get(f"/console/tasks/{'ab' * 16}", headers={"authorization": "Bearer " + "t" * 32}).status_code == 404


def test_the_console_shows_discovered_strings_as_text_never_as_markup():
    """fe-hh names what users sent: an item like "<script>" is drawn as text (escaped), never run as markup."""
    from privagg.service.shuffle.console import task_page

    row = {"task_id": "ab" * 16, "protocol": "fe-hh", "n_users": 100, "min_batch_size": 100, "reports": 100,
           "batches": 1, "unopened": 0, "duplicates": 0, "state": "released"}
    privacy = {"epsilon": 1.0, "delta": 1e-6, "model": "shuffle", "neighbouring": "replace-one <i>x</i>",
               "method_detail": "exact", "assumptions": ["<img src=x onerror=alert(1)>"], "caveats": []}
    html = task_page(row, {"n_users": 100, "privacy": privacy, "heavy_hitters": [
        {"item": "<script>alert(1)</script>", "estimate": 50.0, "stderr": 5.0}]})
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img src=x" not in html and "<i>x</i>" not in html


def test_whatever_the_console_cannot_show_is_a_page_in_its_style(tmp_path):
    """An unknown task, a path the console does not have, a missing result token: each a page (the console's own
    style, the refusal's status, why, and the way back), never the API's JSON."""
    params = calibrate("grr", epsilon=1.0, n_users=20, domain_size=4)
    d = deploy({role: f"sqlite:///{tmp_path}/{role}.db" for role in ("collector", "analyzer")}, params)
    pages = [("", "/console/tasks/UNKNOWN", 404, "task_id must be 32 lowercase hexadecimal characters"),
             ("", f"/console/tasks/{'ab' * 16}", 404, "task_id must name a task of this analyzer"),
             ("", f"/console/tasks/{d.task.task_id}/result", 404, "the console has no page"),
             ("t" * 32, f"/console/tasks/{d.task.task_id}", 401, "Authorization must be Bearer followed by the result "
                                                                "token")]
    with browser() as page:
        for token, path, status, why in pages:
            with served(create_app(d.analyzer, result_token=token or None)) as url:
                answer = page.goto(f"{url}{path}")
                assert answer.status == status and answer.headers["content-type"].startswith("text/html")
                assert page.locator("h1").inner_text() == f"{status} {'Not Found' if status == 404 else 'Unauthorized'}"
                assert why in page.locator("#refusal").inner_text()
                assert "system-ui" in page.locator("body").evaluate("b => getComputedStyle(b).fontFamily")  # its style
                assert "{" not in page.locator("body").inner_text()  # not JSON
                page.click("text=All tasks")
                assert page.url == f"{url}/console"
        with served(create_app(d.analyzer)) as url:  # /console/ is the task list
            page.goto(f"{url}/console/")
            assert page.locator("#tasks").count() == 1


def test_the_console_shows_each_populations_budget_spent_and_remaining(tmp_path):
    from privagg.service import ledger

    params = calibrate("grr", epsilon=1.0, n_users=20, domain_size=4)
    d = deploy({role: f"sqlite:///{tmp_path}/{role}.db" for role in ("collector", "analyzer")}, params)
    with served(create_app(d.analyzer)) as url, browser() as page:
        page.goto(f"{url}/console")  # the deployment's one task, charged to the default population, no budget
        (row,) = page.locator("#budgets tbody tr").all()
        cells = row.locator("td").all_inner_texts()
        assert cells[0] == "default" and cells[2] == "none" and cells[3] == "1, 0" and cells[6] == "unlimited"
        ledger.set_budget(d.analyzer.engine, "phones", 2.5, 1e-6, "week")
        for _ in range(2):
            d.analyzer.create_task(params, population="phones")
        d.analyzer.create_task(calibrate("fe1", epsilon=0.5, delta=1e-7, n_users=400, domain_size=30),
                               population="phones")
        page.goto(f"{url}/console")
        rows = {r.locator("td").nth(0).inner_text(): r.locator("td").all_inner_texts()
                for r in page.locator("#budgets tbody tr").all()}
        phones = rows["phones"]
        # basic composition fits the budget exactly: (2.5, 1e-7) spent, where a PLD's epsilon would hold only at the
        # budget's whole delta (ledger.compose)
        assert phones[1].endswith(("-W" + phones[1][-2:])) and phones[2] == "2.5, 1e-06 a week"
        assert phones[3] == "2.5, 1e-07" and phones[4] == "3" and phones[5] == "basic"
        assert phones[6] == "0, 9e-07"
        assert page.locator("#tasks tbody tr").count() == 4
