import pytest
from tests.browser.seed import seed
from tests.browser.test_screenshots import _session_cookie
pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PAGES = [("overview", "/"), ("project", "/projects/dogfight/"), ("run", "/projects/dogfight/runs/run-7f3a2c/"),
         ("review", "/projects/dogfight/review/"), ("knowledge", "/projects/dogfight/knowledge/"),
         ("compare", "/projects/dogfight/compare/?runs=run-7f3a2c&runs=run-5b91e0&runs=run-c04d17"),
         ("settings", "/projects/dogfight/settings/"), ("prefs", "/preferences/")]

def test_look(browser, live_server, alice, bob):
    seed(alice, bob)
    for w, h, scheme in ((390, 844, "light"), (390, 844, "dark"), (1440, 1000, "light"), (1440, 1000, "dark")):
        ctx = browser.new_context(base_url=live_server.url, viewport={"width": w, "height": h}, color_scheme=scheme,
                                  timezone_id="America/Los_Angeles")
        ctx.add_cookies([_session_cookie(alice, live_server.url)])
        page = ctx.new_page()
        for name, url in PAGES:
            page.goto(url)
            page.wait_for_timeout(700)
            total = page.evaluate("document.documentElement.scrollHeight")
            for i in range(min(3 if w < 600 else 2, -(-total // h))):
                page.screenshot(path=f"/tmp/ui14shots/{name}-{w}-{scheme}-{i}.png", clip={"x": 0, "y": i * h, "width": w, "height": min(h, total - i * h)}, full_page=True)
        ctx.close()
