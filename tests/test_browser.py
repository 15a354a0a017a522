"""The report page in a real browser: headless Chromium (Debian's `chromium`) opens report.html from disk, with no
console error, no network request of any kind, every image decoded and a screenshot that is not blank; the hostile
report too (nothing runs, nothing loads). Without Chromium the test fails: the report's promise is checked only here."""
from __future__ import annotations

import os

import pytest
from browser import blank_fraction, check_page, find_chromium
from reportkit import FIGURES, hostile_report, unchunked_report

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def chromium():
    path = find_chromium()
    if path is None:
        if os.environ.get("STALLSCOPE_ALLOW_NO_BROWSER"):
            pytest.skip("chromium not installed (STALLSCOPE_ALLOW_NO_BROWSER set)")
        pytest.fail("chromium not found: `make test` installs Debian's chromium (apt-get install chromium)")
    return path


def _assert_clean(chk):
    assert chk.console_errors == [], chk.console_errors
    assert chk.requests == [], chk.requests
    assert chk.dialogs == [] and chk.scripts == 0
    assert len(chk.images) == len(FIGURES)
    for img in chk.images:
        assert img["src_kind"] == "data" and img["complete"] and img["natural_width"] > 0, img
    assert chk.body_text_chars > 1000
    assert chk.width <= 1280, "the page must not scroll sideways at laptop width"


def test_report_opens_cleanly_in_headless_chromium(chromium, tmp_path):
    out, _ = unchunked_report()
    chk = check_page(out / "report.html", chromium)
    _assert_clean(chk)
    shot = tmp_path / "report.png"
    shot.write_bytes(chk.screenshot)
    assert chk.screenshot[:8] == b"\x89PNG\r\n\x1a\n" and 0.3 < blank_fraction(chk.screenshot) < 0.99


def test_hostile_report_stays_inert_in_the_browser(chromium):
    out, _ = hostile_report()
    chk = check_page(out / "report.html", chromium)
    _assert_clean(chk)
    assert blank_fraction(chk.screenshot) < 0.99


def test_the_browser_check_sees_what_it_must_reject(chromium, tmp_path):
    """The check itself: a page that fetches, logs an error and has a broken image is caught on every count."""
    bad = tmp_path / "bad.html"
    bad.write_text('<!DOCTYPE html><html><body><p>x</p><img src="http://127.0.0.1:9/none.png">'
                   '<img src="data:image/png;base64,AAAA"><script>console.error("boom")</script></body></html>')
    chk = check_page(bad, chromium)
    assert any("boom" in e for e in chk.console_errors)
    assert "http://127.0.0.1:9/none.png" in chk.requests
    assert chk.scripts == 1 and [i["natural_width"] for i in chk.images] == [0, 0]
