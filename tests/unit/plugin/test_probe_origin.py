"""The probe button starts a DAG run with the user's session cookie: only a form of this server's own pages may.

SameSite=lax keeps the cookie off a POST from another site, not from another port or subdomain of the
same site, so the button's route checks where the form came from (plugin/auth.py, same_origin).
"""

from __future__ import annotations

import pytest

from .conftest import as_user

SAME_ORIGIN = "http://testserver"  # what the TestClient's requests are addressed to


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "https://evil.example"},
        {"Origin": "http://testserver.evil.example"},
        {"Origin": "null"},  # a sandboxed frame or a page that hides where it is
        {"Referer": "https://evil.example/form.html"},
        {},  # a browser always sends Origin with a POST: nothing to check against is refused too
    ],
    ids=["other-site", "look-alike", "null", "referer-only", "no-origin"],
)
def test_the_probe_button_refuses_a_post_from_another_origin(client, headers):
    """A form on another origin (another port or subdomain of the same site gets SameSite=lax cookies)
    cannot start the probe DAG with an admin's session."""
    cookie = as_user("admin")["headers"]
    response = client.post("/skynomad/probe", follow_redirects=False, headers={**cookie, **headers})
    assert response.status_code == 403, response.text
    assert "origin" in response.text.lower()


@pytest.mark.parametrize(
    "headers",
    [{"Origin": SAME_ORIGIN}, {"Referer": SAME_ORIGIN + "/skynomad/markets?days=7"}],
    ids=["origin", "referer"],
)
def test_the_probe_button_works_from_the_markets_page(client, headers):
    cookie = as_user("admin")["headers"]
    response = client.post("/skynomad/probe", follow_redirects=False, headers={**cookie, **headers})
    assert response.status_code == 303 and "markets?probe=" in response.headers["location"]


def test_a_bearer_token_needs_no_origin_as_no_browser_sends_one_by_itself(client):
    response = client.post("/skynomad/probe", follow_redirects=False, headers={"Authorization": "Bearer admin-token"})
    assert response.status_code == 303
    response = client.post("/skynomad/probe", headers={"Authorization": "Bearer viewer-token"})
    assert response.status_code == 403  # still the auth manager's say


def test_the_probe_origin_check_comes_after_the_session_check(client):
    assert client.post("/skynomad/probe", headers={"Origin": "https://evil.example"}).status_code == 401


def test_behind_a_proxy_the_origin_of_the_configured_base_url_counts(client, monkeypatch):
    """A proxy that forwards https://airflow.example.com to the api-server under another host name:
    the browser's origin is [api] base_url's, not the one the api-server sees."""
    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example.com:443/team-a")
    cookie = as_user("admin")["headers"]
    sent = {**cookie, "Origin": "https://airflow.example.com"}
    assert client.post("/skynomad/probe", follow_redirects=False, headers=sent).status_code == 303
    sent = {**cookie, "Origin": "https://airflow.example.com:8443"}
    assert client.post("/skynomad/probe", follow_redirects=False, headers=sent).status_code == 403


def test_an_origin_is_scheme_host_and_a_port_other_than_the_default():
    from airflow_provider_skynomad.plugin.auth import origin_of

    assert origin_of("HTTPS://Airflow.Example.com:443/x?y") == "https://airflow.example.com"
    assert origin_of("http://user:pw@10.0.0.1:8080/") == "http://10.0.0.1:8080"
    assert origin_of("http://[::1]:8080/skynomad/") == "http://[::1]:8080"
    for junk in ("", "null", "javascript:alert(1)", "http://", "http://host:99999/", "//host/"):
        assert origin_of(junk) == "", junk
