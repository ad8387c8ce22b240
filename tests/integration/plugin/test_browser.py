"""The plugin in a real api-server, seen by headless Chromium (Debian's chromium and chromium-driver).

A temporary AIRFLOW_HOME with SimpleAuthManager and known passwords, `airflow db migrate`, seeded
jobs and market table (seed.py), `airflow api-server` on a free localhost port. The browser signs
in on Airflow's own login page, opens the job page of a finished run and the markets page, and
saves screenshots in the test's tmp_path (their paths are printed).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.support.network import AirflowApi, free_port
from tests.support.plugin_seed import DEADLINE_HOURS, FINISHED, FINISHED_COST_USD, FINISHED_ZONES, RUNNING

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
PASSWORD = "viewer-pass-1"
ADMIN_PASSWORD = "admin-pass-1"
MARKER = "Marker-Pa55word-browser"
CONN_ID = "skynomad_browser"

HAVE_BROWSER = os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)
IN_CI = os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")
# Skipped on a machine without the browser, but never in CI, where `make test` installs it.
# One group: all its tests on one xdist worker, so the module's api-server starts once, not once per worker.
pytestmark = [
    pytest.mark.skipif(
        not HAVE_BROWSER and not IN_CI, reason="needs Debian's chromium and chromium-driver (make test installs them)"
    ),
    pytest.mark.xdist_group("browser"),
]


@pytest.fixture(scope="module")
def api_server(tmp_path_factory):
    home = tmp_path_factory.mktemp("airflow-home")
    passwords = home / "passwords.json"
    passwords.write_text(json.dumps({"viewer": PASSWORD, "admin": ADMIN_PASSWORD}))
    port = free_port()
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
        "AIRFLOW__CORE__AUTH_MANAGER": "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "viewer:viewer,admin:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__API_AUTH__JWT_SECRET": "skynomad-browser-test-secret",
        "AIRFLOW__API__SECRET_KEY": "skynomad-browser-test-secret",
        "SKYNOMAD_HOME": str(home / "skynomad"),
    }
    (home / "dags").mkdir()
    # The example DAG, parsed into the DB, so that Airflow's own task pages (and their plugin tab) show the runs.
    shutil.copy(Path(__file__).resolve().parents[3] / "example_dags" / "skynomad_fine_tune.py", home / "dags")
    run = lambda *args: subprocess.run(args, env=env, capture_output=True, text=True, timeout=300)  # noqa: E731
    migrated = run(sys.executable, "-m", "airflow", "db", "migrate")
    assert migrated.returncode == 0, migrated.stderr[-3000:]
    parsed = run(sys.executable, "-m", "airflow", "dags", "reserialize")
    assert parsed.returncode == 0, parsed.stderr[-3000:]
    seed = Path(__file__).resolve().parents[2] / "support" / "plugin_seed.py"
    market_url = f"sqlite:///{home}/skynomad/market.db"  # also the default connection's table (SKYNOMAD_HOME)
    seeded = run(sys.executable, str(seed), "--market-url", market_url, "--conn-id", CONN_ID, "--password", MARKER)
    assert seeded.returncode == 0, seeded.stderr[-3000:]
    log = open(home / "api-server.log", "w")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        [sys.executable, "-m", "airflow", "api-server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 240
    try:
        while True:
            assert server.poll() is None, (home / "api-server.log").read_text()[-3000:]
            if AirflowApi(port).healthy():
                break
            assert time.monotonic() < deadline, (home / "api-server.log").read_text()[-3000:]
            time.sleep(1)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1400"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_without_a_session_the_api_server_refuses_every_plugin_page(api_server):
    job = "/skynomad/job/{}/{}/{}".format(*FINISHED)
    for path in (job, "/skynomad/jobs", "/skynomad/markets"):
        assert status_of(api_server + path) in (401, 403), path


def screenshot(driver, path: Path) -> None:
    """Save the whole page in the test's tmp_path (and in $SKYNOMAD_SCREENSHOTS when set, to keep them)."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, min(max(height + 40, 800), 4000))
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    keep = os.environ.get("SKYNOMAD_SCREENSHOTS")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / path.name)
        print(f"screenshot kept: {Path(keep) / path.name}")


def sign_in(browser, api_server: str, user: str, password: str):
    """Sign in on Airflow's own login page (SimpleAuthManager's form)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 60)
    browser.delete_all_cookies()
    browser.get(f"{api_server}/auth/login/")
    wait.until(ec.presence_of_element_located((By.NAME, "username"))).send_keys(user)
    browser.find_element(By.NAME, "password").send_keys(password)
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait.until(lambda d: d.get_cookie("_token") is not None)
    return browser


@pytest.fixture(scope="module")
def signed_in(api_server, browser):
    """The browser signed in as the viewer."""
    return sign_in(browser, api_server, "viewer", PASSWORD)


def test_a_signed_in_user_sees_the_job_page_and_the_markets_heatmap(api_server, signed_in, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    browser = signed_in
    wait = WebDriverWait(browser, 60)

    browser.get(api_server + "/skynomad/job/{}/{}/{}".format(*FINISHED))
    wait.until(ec.presence_of_element_located((By.ID, "job-cards")))
    text = browser.find_element(By.TAG_NAME, "body").text
    for zone in FINISHED_ZONES:
        assert zone in text
    assert f"${FINISHED_COST_USD:,.2f}" in text
    assert f"{DEADLINE_HOURS:.2f} h: met" in text and "deadline met" in text
    assert browser.find_elements(By.CSS_SELECTOR, "svg.gantt rect.bar")
    screenshot(browser, tmp_path / "job-page-finished.png")

    browser.get(api_server + "/skynomad/job/{}/{}/{}".format(*RUNNING))
    wait.until(ec.presence_of_element_located((By.ID, "job-cards")))
    text = browser.find_element(By.TAG_NAME, "body").text
    assert "running for 4.50 h of 16.00 h" in text and "latest safe switch to on-demand" in text
    assert "16.00 h: on track" in text
    screenshot(browser, tmp_path / "job-page-running.png")

    browser.get(f"{api_server}/skynomad/markets?days=3")  # the default connection: this table (SKYNOMAD_HOME)
    wait.until(ec.presence_of_element_located((By.ID, "availability-heatmap")))
    cells = browser.find_elements(By.CSS_SELECTOR, "#availability-heatmap rect.cell")
    assert len(cells) > 6 and cells[0].size["width"] > 0
    assert MARKER not in browser.page_source
    screenshot(browser, tmp_path / "markets-page.png")

    browser.get(f"{api_server}/skynomad/jobs")
    wait.until(ec.presence_of_element_located((By.ID, "jobs")))
    assert "finished_run" in browser.page_source and "running_run" in browser.page_source
    screenshot(browser, tmp_path / "jobs-dashboard.png")


@pytest.mark.parametrize(
    ("route", "title", "element", "name"),
    [
        ("/plugin/skynomad_markets", "SkyNomad markets", "availability-heatmap", "airflow-ui-markets.png"),
        (
            "/dags/{}/runs/{}/tasks/{}/plugin/skynomad_job".format(*FINISHED),
            "SkyNomad job",
            "job-cards",
            "airflow-ui-task-instance-job-tab.png",
        ),
    ],
)
def test_the_pages_are_in_airflows_own_ui(api_server, signed_in, tmp_path, route, title, element, name):
    """The nav entry and the task instance tab show the plugin's pages in Airflow's iframe."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    browser = signed_in
    wait = WebDriverWait(browser, 90)
    browser.set_window_size(1400, 1200)
    browser.get(api_server + route)
    try:
        frame = wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, f"iframe[title='{title}']")))
    except Exception:
        browser.save_screenshot(str(tmp_path / f"failed-{name}"))
        print(f"no plugin iframe; the page is in {tmp_path / f'failed-{name}'}")
        (tmp_path / "failed.html").write_text(browser.page_source)
        keep = os.environ.get("SKYNOMAD_SCREENSHOTS")
        if keep:
            shutil.copy(tmp_path / f"failed-{name}", keep)
            shutil.copy(tmp_path / "failed.html", keep)
        raise
    source = frame.get_attribute("src")
    browser.switch_to.frame(frame)
    try:
        wait.until(ec.presence_of_element_located((By.ID, element)))
    except Exception:
        text = browser.find_element(By.TAG_NAME, "body").text[:500]
        raise AssertionError(f"the plugin's iframe ({source}) shows no #{element}: {text}") from None
    browser.switch_to.default_content()
    time.sleep(1)  # let the surrounding UI finish drawing
    path = tmp_path / name
    browser.save_screenshot(str(path))
    print(f"screenshot: {path}")
    keep = os.environ.get("SKYNOMAD_SCREENSHOTS")
    if keep:
        shutil.copy(path, Path(keep) / path.name)
        print(f"screenshot kept: {Path(keep) / path.name}")


def test_the_probe_button_works_on_the_page_and_not_from_another_origin_of_the_same_site(api_server, browser):
    """Runs last: it signs the browser in as the admin. The button's form reaches the route (the DAG is
    not in this Airflow: "There is no skynomad_probe DAG"); the same form on a page of another port of
    the same host, which SameSite=lax sends the session cookie from, gets 403."""
    import http.server
    import threading

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    sign_in(browser, api_server, "admin", ADMIN_PASSWORD)
    wait = WebDriverWait(browser, 60)
    browser.get(f"{api_server}/skynomad/markets?days=3")
    wait.until(ec.element_to_be_clickable((By.ID, "trigger-probe"))).click()
    wait.until(lambda d: "probe=" in d.current_url)
    assert "There is no skynomad_probe DAG." in browser.find_element(By.TAG_NAME, "body").text

    form = f'<form method="post" action="{api_server}/skynomad/probe" id="f"></form><script>f.submit()</script>'

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the handler's protocol
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(form.encode())

        def log_message(self, *args):
            pass

    # Threads per connection: Chromium opens spare connections it never sends on, and a one-thread
    # server would sit in reading one until Chromium drops it (100 s), holding up shutdown() below.
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        browser.get(f"http://127.0.0.1:{other.server_address[1]}/")
        wait.until(lambda d: "/skynomad/probe" in d.current_url)
        body = browser.find_element(By.TAG_NAME, "body").text
        assert "not from this Airflow" in body, body
    finally:
        other.shutdown()


def test_airflows_run_page_fills_its_deadline_badge_after_the_header(api_server, signed_in, tmp_path):
    """Airflow's own run page: the "Deadline" row comes with the header (the DAG has a DeadlineAlert), its
    badge ("Met" for a run that succeeded in time) only after two more requests the browser makes then,
    so on a busy box the row is blank for a while (docs/airflow.md). The job tab draws its verdict with
    the page; this test shows the badge does fill, and how long after the row it took."""
    from selenium.webdriver.common.by import By

    browser = signed_in
    browser.set_window_size(1400, 1200)
    browser.get(api_server + "/dags/{}/runs/{}".format(*FINISHED[:2]))
    started, row_at, badge_at = time.monotonic(), None, None
    while time.monotonic() - started < 90 and badge_at is None:
        text = browser.find_element(By.TAG_NAME, "body").text
        if row_at is None and "\nDeadline\n" in text:
            row_at = time.monotonic() - started
        if "\nDeadline\nMet\n" in text:
            badge_at = time.monotonic() - started
        time.sleep(0.2)
    screenshot(browser, tmp_path / "airflow-run-page-deadline.png")
    assert row_at is not None, "no Deadline row on the run page of a DAG with a DeadlineAlert"
    assert badge_at is not None, "the Deadline row stayed blank for 90 s"
    print(f"Deadline row at {row_at:.1f} s, its badge at {badge_at:.1f} s")
