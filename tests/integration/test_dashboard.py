"""The dashboard (DESIGN §11) in a real browser: Debian's headless Chromium driven by
chromium-driver + python3-selenium against the real server.

Every wait is on a condition with a deadline (WebDriverWait / wait_until), never a
fixed sleep. Screenshots go to build/dashboard/ for review.
"""

import base64
import json
import os
import urllib.error
import urllib.request

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from conftest import REPO, now_ms, pairs, wait_until

SHOTS = os.path.join(REPO, "build", "dashboard")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver")
WAIT = 15  # seconds; the page polls every 2 s


@pytest.fixture(scope="module")
def driver():
    opts = webdriver.ChromeOptions()
    opts.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--window-size=1400,1000", "--no-first-run", "--disable-extensions",
              "--disable-background-networking", "--disable-component-update",
              "--disable-sync", "--disable-default-apps", "--lang=en-US"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    d = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    d.set_page_load_timeout(WAIT)
    os.makedirs(SHOTS, exist_ok=True)
    yield d
    d.quit()


class Dash:
    """A server with its HTTP port, and the browser pointed at it."""

    def __init__(self, srv, port, driver, store):
        self.store = store
        self.srv = srv
        self.port = port
        self.base = "http://127.0.0.1:%d" % port
        self.d = driver
        self.r = srv.client()

    def open(self, hash_=""):
        # a fresh document each time: about:blank first, so a hash-only change still reloads
        self.d.get("about:blank")
        self.d.get(self.base + "/" + hash_)

    def wait(self, cond, what, timeout=WAIT):
        return WebDriverWait(self.d, timeout, poll_frequency=0.05).until(
            lambda d: cond(d), message="timed out waiting for " + what)

    def find(self, css):
        return self.d.find_element(By.CSS_SELECTOR, css)

    def finds(self, css):
        return self.d.find_elements(By.CSS_SELECTOR, css)

    def text(self, css):
        """The text of the first match, read in one step (the page re-renders as it polls)."""
        return self.d.execute_script(
            "const e = document.querySelector(arguments[0]); return e ? e.innerText.trim() : null;", css)

    def attrs(self, css, name):
        """The attribute `name` of every match, read in one step."""
        return self.d.execute_script(
            "return [...document.querySelectorAll(arguments[0])].map((e) => e.getAttribute(arguments[1]));",
            css, name)

    def shot(self, name):
        self.d.save_screenshot(os.path.join(SHOTS, "%s-%s.png" % (name, self.store)))

    def http(self, method, path, body=None, headers=None):
        """(status, parsed JSON or raw bytes) of a request made outside the browser."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                status, raw, ctype = resp.status, resp.read(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            status, raw, ctype = e.code, e.read(), e.headers.get("Content-Type", "")
        return status, (json.loads(raw) if "json" in ctype and raw else raw)

    def state(self, topic, job_id):
        g = self.r.execute_command("GET", topic, job_id)
        return None if g is None else pairs(g)["state"].decode()

    def confirm(self):
        """Presses OK in the confirmation dialog and waits for it to close."""
        self.wait(lambda d: self.find("#modal").is_displayed(), "the confirmation dialog")
        self.find("#modal-ok").click()
        self.wait(lambda d: not self.find("#modal").is_displayed(), "the dialog to close")

    def requests_seen(self):
        """URLs of every request the page made so far (the browser's network log)."""
        urls = []
        for entry in self.d.get_log("performance"):
            msg = json.loads(entry["message"])["message"]
            if msg.get("method") == "Network.requestWillBeSent":
                urls.append(msg["params"]["request"]["url"])
        return urls


@pytest.fixture
def dash(make_server, driver, store):
    def start(*flags):
        srv = make_server(*flags)
        return Dash(srv, srv.http_port, driver, store.name)
    return start


def make_dead(r, topic, job_id, body=b"x"):
    """A dead job: no retries, reserved once, NACKed."""
    r.execute_command("ADD", topic, job_id, body, "RETRIES", 0)
    got = r.execute_command("RESERVE", "TIMEOUT", 0, "FROM", topic)
    assert got and got[0][1] == job_id.encode()
    assert r.execute_command("NACK", topic, job_id) == b"dead"


def cell(dash, topic, state):
    return dash.text('tr[data-topic="%s"] td[data-state="%s"]' % (topic, state))


# ---------------------------------------------------------------------------


def test_overview_lists_topics_with_counts(dash):
    d = dash()
    for i in range(3):
        d.r.execute_command("ADD", "dash-orders", "r%d" % i, "{}")
    for i in range(2):
        d.r.execute_command("ADD", "dash-orders", "d%d" % i, "{}", "DELAY", 3600000)
    make_dead(d.r, "dash-mail", "m1")
    d.r.execute_command("ADD", "dash-mail", "m2", "x", "DELAY", 3600000)
    d.open()
    d.wait(lambda _: cell(d, "dash-orders", "ready") == "3", "dash-orders ready 3")
    assert cell(d, "dash-orders", "delayed") == "2"
    assert cell(d, "dash-orders", "reserved") == "0"
    assert cell(d, "dash-orders", "dead") == "0"
    assert cell(d, "dash-mail", "dead") == "1"
    assert cell(d, "dash-mail", "delayed") == "1"
    # sorted by backlog: the topic with ready jobs first
    rows = d.attrs("#topics tr[data-topic]", "data-topic")
    assert rows == ["dash-orders", "dash-mail"]
    # the server panel and both charts are there; a change shows on the next poll
    assert "jobs" in d.text("#server-kv")
    d.r.execute_command("ADD", "dash-orders", "r9", "{}")
    d.wait(lambda _: cell(d, "dash-orders", "ready") == "4", "the count to follow a change")
    # throughput and fire lag need two readings: wait until the charts have moved
    d.r.execute_command("RESERVE", "TIMEOUT", 0, "COUNT", 2, "FROM", "dash-orders")
    d.wait(lambda _: "p99" in (d.text("#lag-now") or ""), "a fire-lag reading")
    d.shot("overview")


def test_paging_walks_every_job_of_a_500_job_topic(dash):
    d = dash()
    want = {"job-%03d" % i for i in range(500)}
    p = d.r.pipeline(transaction=False)
    for i in sorted(want):
        p.execute_command("ADD", "dash-big", i, "b")
    p.execute()
    d.open("#/topic/dash-big/ready")
    seen, page = [], 1
    while True:
        d.wait(lambda _: (d.text("#page-info") or "").startswith("page %d " % page),
               "page %d" % page)
        seen += d.attrs("#jobs tr[data-id]", "data-id")
        if page == 2:
            d.shot("topic-paging")
        if not d.find("#page-next").is_enabled():
            break
        d.find("#page-next").click()
        page += 1
    assert len(seen) == len(set(seen)) == 500, (len(seen), len(set(seen)))
    assert set(seen) == want
    assert page > 1  # LIST pages of about 50 ids (more when a bucket holds more)
    assert "end" in d.text("#page-info")


def test_job_detail_lookup_json_and_hex(dash):
    d = dash()
    d.r.execute_command("ADD", "dash-detail", "json-1", '{"order":42,"items":["a","b"]}',
                        "DELAY", 180000)
    d.r.execute_command("ADD", "dash-detail", "bin-1", b"\x00\x01\xfe\xffbinary", "DELAY", 180000)
    d.open("#/topic/dash-detail/delayed")
    d.find("#lookup-id").send_keys("json-1\n")
    d.wait(lambda _: d.text("#job-state") == "delayed", "the job's detail")
    body = d.text("#job-body")
    assert body == json.dumps({"order": 42, "items": ["a", "b"]}, indent=2)
    detail = d.text("#job-detail")
    assert "in 3 min" in detail  # due, relative
    d.shot("job-json")
    d.find("#lookup-id").clear()
    d.find("#lookup-id").send_keys("bin-1\n")
    d.wait(lambda _: "binary" in (d.text("#job-detail") or ""), "the binary job")
    assert d.text("#job-body").startswith("00000000  00 01 fe ff 62 69 6e 61  72 79")
    assert "|....binary|" in d.text("#job-body")
    d.find("#lookup-id").clear()
    d.find("#lookup-id").send_keys("nosuch\n")
    d.wait(lambda _: "No job nosuch" in (d.text("#job-missing") or ""), "not found")


def test_kick_from_the_page_moves_a_dead_job_to_ready(dash):
    d = dash()
    make_dead(d.r, "dash-kick", "k1", b'{"retry":true}')
    make_dead(d.r, "dash-kick", "k2")
    make_dead(d.r, "dash-kick", "k3")
    d.open("#/topic/dash-kick/dead/k1")
    d.wait(lambda _: d.text("#job-state") == "dead", "the dead job's detail")
    d.wait(lambda _: d.finds("#job-kick"), "the kick button")
    d.find("#job-kick").click()
    d.shot("kick-confirm")
    d.confirm()
    assert wait_until(lambda: d.state("dash-kick", "k1") == "ready", timeout=WAIT)
    g = pairs(d.r.execute_command("GET", "dash-kick", "k1"))
    assert g["attempts"] == 0 and g["body"] == b'{"retry":true}'
    assert d.state("dash-kick", "k2") == "dead"
    # and all the others at once
    d.wait(lambda _: not d.find("#kick-all").get_attribute("hidden"), "kick all")
    d.find("#kick-all").click()
    d.confirm()
    assert wait_until(lambda: d.state("dash-kick", "k2") == d.state("dash-kick", "k3") == "ready",
                      timeout=WAIT)


def test_add_delete_and_purge_from_the_page(dash):
    d = dash()
    d.open()
    d.wait(lambda _: d.finds("#add-job") and d.find("#add-job").is_displayed(), "add button")
    d.find("#add-job").click()
    d.find("#add-topic").send_keys("dash-add")
    d.find("#add-id").send_keys("a1")
    d.find("#add-delay").send_keys("30m")
    d.find("#add-body").send_keys('{"hello":"world"}')
    d.shot("add-job")
    d.confirm()
    assert wait_until(lambda: d.state("dash-add", "a1") == "delayed", timeout=WAIT)
    # a bad value is refused by the API, and the dialog says what was wrong
    d.find("#add-job").click()
    d.find("#add-topic").send_keys("dash-add")
    d.find("#add-delay").send_keys("soon")
    d.find("#modal-ok").click()
    d.wait(lambda _: "delay" in (d.text("#modal-body .err") or ""), "the API's error")
    d.find("#modal-cancel").click()
    # delete one job
    d.r.execute_command("ADD", "dash-add", "a2", "x")
    d.open("#/topic/dash-add/delayed/a1")
    d.wait(lambda _: d.finds("#job-delete"), "the delete button")
    d.find("#job-delete").click()
    d.confirm()
    assert wait_until(lambda: d.state("dash-add", "a1") is None, timeout=WAIT)
    # purge asks for the topic's name first
    d.find("#purge").click()
    d.find("#confirm-topic").send_keys("wrong")
    d.find("#modal-ok").click()
    d.wait(lambda _: "not dash-add" in (d.text("#modal-body .err") or ""), "the refusal")
    assert d.state("dash-add", "a2") == "ready"
    d.find("#confirm-topic").clear()
    d.find("#confirm-topic").send_keys("dash-add")
    d.find("#modal-ok").click()
    assert wait_until(lambda: d.state("dash-add", "a2") is None, timeout=WAIT)


def test_readonly_hides_and_refuses_actions(dash):
    d = dash("--dashboard", "readonly")
    make_dead(d.r, "dash-ro", "k1")
    d.open("#/topic/dash-ro/dead/k1")
    d.wait(lambda _: d.text("#job-state") == "dead", "the dead job's detail")
    d.wait(lambda _: d.find("#mode").is_displayed(), "the read-only badge")
    assert not d.finds("#job-kick") and not d.finds("#job-delete")
    assert not d.find("#kick-all").is_displayed() and not d.find("#purge").is_displayed()
    d.shot("readonly")
    # hidden is not enough: the server refuses a change the page asks for anyway
    res = d.d.execute_async_script("""
        const done = arguments[arguments.length - 1];
        fetch('/v1/topics/dash-ro/kick', {method: 'POST', headers: {'Content-Type': 'application/json'},
              body: '{}'}).then(async (r) => done([r.status, await r.json()]));""")
    assert res[0] == 403 and res[1]["error"] == "READONLY", res
    res = d.d.execute_async_script("""
        const done = arguments[arguments.length - 1];
        api('DELETE', '/v1/topics/dash-ro').then(() => done('ok'), (e) => done(e.status));""")
    assert res == 403
    assert d.state("dash-ro", "k1") == "dead"
    # reading still works, and API clients (no browser) are the token's business
    st, _ = d.http("GET", "/v1/topics/dash-ro/jobs/k1", headers={"X-Delayq-Dashboard": "1"})
    assert st == 200
    st, body = d.http("POST", "/v1/topics/dash-ro/kick", {}, headers={"X-Delayq-Dashboard": "1"})
    assert st == 403 and body["error"] == "READONLY"
    st, body = d.http("POST", "/v1/topics/dash-ro/kick", {})
    assert st == 200 and body["kicked"] == 1


def test_page_requests_only_its_server(dash):
    d = dash()
    d.r.execute_command("ADD", "dash-net", "n1", "x")
    d.d.get("about:blank")
    d.d.get_log("performance")  # drop what earlier tests left
    d.d.get_log("browser")
    d.open()
    d.wait(lambda _: cell(d, "dash-net", "ready") == "1", "the overview")
    d.open("#/topic/dash-net/ready/n1")
    d.wait(lambda _: d.text("#job-state") == "ready", "the job")
    urls = [u for u in d.requests_seen() if u != "about:blank"]
    assert any(u.endswith("/dashboard/app.js") for u in urls), urls
    assert any("/v1/server" in u for u in urls), urls
    foreign = [u for u in urls if not u.startswith(d.base + "/") and not u.startswith("data:")]
    assert not foreign, foreign
    errors = [e for e in d.d.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


def test_login_keeps_the_token_in_the_session(dash):
    d = dash("--requirepass", "s3cret")
    d.r = d.srv.client(password="s3cret")
    d.r.execute_command("ADD", "dash-auth", "a1", "x")
    d.open()
    d.wait(lambda _: d.find("#login").is_displayed(), "the login field")
    assert not d.finds("#topics tr[data-topic]")
    d.find("#token").send_keys("wrong\n")
    d.wait(lambda _: d.find("#login").is_displayed(), "a refusal")
    d.find("#token").send_keys("s3cret\n")
    d.wait(lambda _: cell(d, "dash-auth", "ready") == "1", "the overview once logged in")
    assert d.d.execute_script("return sessionStorage.getItem('delayq.token')") == "s3cret"
    d.d.refresh()
    d.wait(lambda _: cell(d, "dash-auth", "ready") == "1", "the overview after a reload")
    assert not d.find("#login").is_displayed()
    d.shot("login")
    st, _ = d.http("GET", "/v1/server")
    assert st == 401
    st, _ = d.http("GET", "/")  # the page itself holds no data
    assert st == 200


def test_assets_routes_and_off(dash):
    d = dash()
    for path, ctype in (("/", "text/html"), ("/dashboard/app.js", "text/javascript"),
                        ("/dashboard/style.css", "text/css")):
        req = urllib.request.urlopen(d.base + path, timeout=10)
        assert req.status == 200 and req.headers["Content-Type"].startswith(ctype)
        assert len(req.read()) > 500
    st, _ = d.http("GET", "/dashboard/nosuch.js")
    assert st == 404
    st, body = d.http("GET", "/v1/overview?sort=size")
    assert st == 400 and "sort" in body["message"]
    st, body = d.http("GET", "/v1/overview?limit=0")
    assert st == 400 and "limit" in body["message"]
    st, body = d.http("GET", "/v1/overview?topic=no%20spaces")
    assert st == 400 and "topic" in body["message"], body
    st, body = d.http("GET", "/v1/overview?topic=nosuch")
    assert st == 200 and body["topics"] == [] and body["matched"] == 0
    st, body = d.http("GET", "/v1/overview?colour=red")
    assert st == 400 and "colour" in body["message"]
    for i in range(30):
        d.r.execute_command("ADD", "t%02d" % i, "j", "x", "DELAY", 60000)
    make_dead(d.r, "t07", "dead1")
    st, body = d.http("GET", "/v1/overview?sort=dead&limit=5")
    assert st == 200 and body["ntopics"] == 30 and body["matched"] == 30
    assert [t["topic"] for t in body["topics"]] == ["t07", "t00", "t01", "t02", "t03"]
    st, body = d.http("GET", "/v1/overview?sort=name&limit=5&offset=25&match=t2")
    assert [t["topic"] for t in body["topics"]] == []
    st, body = d.http("GET", "/v1/overview?sort=name&match=t2")
    assert body["matched"] == 10 and body["topics"][0]["topic"] == "t20"
    st, body = d.http("GET", "/v1/server")
    assert st == 200 and body["jobs"]["total"] == 31 and body["totals"]["added"] == 31
    assert body["store"]["up"] is True and body["dashboard"] == "on"
    assert len(body["fire_lag"]["buckets"]) == len(body["fire_lag"]["bounds"]) + 1

    off = dash("--dashboard", "off")
    st, _ = off.http("GET", "/")
    assert st == 404
    st, _ = off.http("GET", "/v1/stats")
    assert st == 200


def test_oldest_ready_age(dash):
    d = dash()
    st, body = d.http("GET", "/v1/overview?topic=dash-age")
    assert st == 200 and (body["topics"] == [] or body["topics"][0]["oldest_ready"] is None)
    d.r.execute_command("ADD", "dash-age", "old", "x")
    due = pairs(d.r.execute_command("GET", "dash-age", "old"))["due"]
    wait_until(lambda: now_ms() > due + 2)
    for i in range(20):  # several shards of the Redis store hold some
        d.r.execute_command("ADD", "dash-age", "new%d" % i, "x")
    d.r.execute_command("ADD", "dash-age", "later", "x", "DELAY", 60000)
    st, body = d.http("GET", "/v1/overview?topic=dash-age")
    assert st == 200
    assert body["topics"][0]["oldest_ready"] == due
    assert body["topics"][0]["oldest_ready"] <= body["now"]
