"""The rendered book, looked at in a real browser: Debian's Chromium, headless, driven through
chromedriver by selenium. Used by tests/test_book.py.

`check_page` opens one page of a built book, served from 127.0.0.1 with every other host
unreachable, and returns what is wrong with it, one line a problem: a console error, an image
that did not load, an image without a numbered caption or with a file path for alt text, TeX
left raw or no MathJax output, a heading numbered twice, a code or output block (or the page)
wider than the window. An empty list means the page reads as it should.
"""

import contextlib
import functools
import http.server
import shutil
import tempfile
import threading
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
WIDTH, HEIGHT = 1400, 1000  # the window every page is checked at (CSS pixels)

# Debian's Chromium on a closed network: these flags keep it from hanging on its own
# background connections; --host-resolver-rules makes every host but the local server
# unreachable, so a page that needs the network (a CDN) fails here as it would offline.
CHROMIUM_FLAGS = (
    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars", f"--window-size={WIDTH},{HEIGHT}",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
)


def missing():
    """Why the browser check cannot run here, or None when it can."""
    absent = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if absent:
        return (f"Chromium is not installed ({', '.join(absent)} missing): "
                "apt-get install chromium chromium-driver")
    return None


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve(directory):
    """An HTTP server for `directory` on 127.0.0.1; yields its base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def chromium():
    """A headless Chromium (a fresh profile each time) under selenium's WebDriver."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    try:
        driver.set_page_load_timeout(60)
        driver.set_script_timeout(60)
        # the window's inner width is what the page is laid out at: make it WIDTH
        driver.set_window_size(WIDTH, HEIGHT)
        inner = driver.execute_script("return [window.innerWidth, window.innerHeight]")
        driver.set_window_size(2 * WIDTH - inner[0], 2 * HEIGHT - inner[1])
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


# Runs in the page once it has loaded and MathJax (if the page has any) has typeset.
_INSPECT = r"""
const out = {images: [], math: {}, headings: [], wide: [], page: {}};
const article = document.querySelector("article") || document.body;
for (const img of document.images) {
  const fig = img.closest("figure");
  out.images.push({
    src: img.getAttribute("src"), alt: img.getAttribute("alt") || "",
    loaded: img.complete && img.naturalWidth > 0,
    inOutput: !!img.closest(".cell_output"),
    caption: fig && fig.querySelector("figcaption .caption-number")
             ? fig.querySelector("figcaption").innerText.trim() : null,
    shownWidth: img.getBoundingClientRect().width, naturalWidth: img.naturalWidth,
  });
}
out.math.spans = document.querySelectorAll(".math").length;
out.math.rendered = document.querySelectorAll("mjx-container").length;
out.math.mathjax = !!(window.MathJax && window.MathJax.startup);
const prose = article.cloneNode(true);  // the text outside code: TeX left raw shows there
for (const el of prose.querySelectorAll("pre, code, script, style, textarea")) el.remove();
const text = prose.textContent;
out.math.raw = (text.match(/\\\(|\\\[|\$\$/g) || []).length;
for (const h of article.querySelectorAll("h1, h2, h3, h4, h5, h6")) {
  const num = h.querySelector(".section-number");
  const rest = (num ? h.innerText.replace(num.innerText, "") : h.innerText).trim();
  out.headings.push({numbered: !!num, text: h.innerText.trim(), rest: rest});
}
const blocks = article.querySelectorAll(
  "div.highlight pre, div.cell_output .output, div.cell_output pre, div.cell_output table");
for (const el of blocks) {
  if (el.scrollWidth > el.clientWidth + 1) {
    out.wide.push({what: el.tagName.toLowerCase() + "." + [...el.classList].join("."),
                   scroll: el.scrollWidth, client: el.clientWidth,
                   text: (el.innerText || "").split("\n").reduce((a, b) => b.length > a.length ? b : a, "").slice(0, 80)});
  }
}
const root = document.scrollingElement || document.documentElement;
out.page = {scroll: root.scrollWidth, client: root.clientWidth, width: window.innerWidth};
return out;
"""

# Waits for the load event, then for MathJax's startup promise when MathJax is there.
_SETTLE = r"""
const done = arguments[arguments.length - 1];
function typeset() {
  if (window.MathJax && window.MathJax.startup && window.MathJax.startup.promise) {
    window.MathJax.startup.promise.then(() => done("typeset"), (e) => done("mathjax error: " + e));
  } else { done("no mathjax"); }
}
if (document.readyState === "complete") { setTimeout(typeset, 0); }
else { window.addEventListener("load", () => setTimeout(typeset, 0)); }
"""

_TWICE = r"^\d+(\.\d+)*\.?\s"  # a heading whose own text still starts with a number


def check_page(driver, url, screenshot=None):
    """Problems of the page at `url` (empty: none); writes a full-page PNG to `screenshot`."""
    import re

    driver.get_log("browser")  # drop what an earlier page left
    driver.get(url)
    driver.execute_async_script(_SETTLE)
    found = driver.execute_script(_INSPECT)
    problems = []
    for entry in driver.get_log("browser"):
        if entry.get("level") == "SEVERE":
            problems.append(f"console error: {entry.get('message', '')[:200]}")
    for img in found["images"]:
        if not img["loaded"]:
            problems.append(f"image not loaded: {img['src']}")
        if img["inOutput"]:
            alt = img["alt"].strip()
            if not alt or re.fullmatch(r"\S*\.(png|jpe?g|svg|gif)", alt, re.I):
                problems.append(f"image without alt text (alt={alt!r}): {img['src']}")
            if not img["caption"]:
                problems.append(f"figure without a numbered caption: {img['src']}")
    math = found["math"]
    if math["raw"]:
        problems.append(f"math not rendered: {math['raw']} raw TeX delimiters left in the text")
    if math["spans"] and not math["rendered"]:
        problems.append(f"math not rendered: {math['spans']} math elements, no MathJax output"
                        + ("" if math["mathjax"] else " (MathJax did not load)"))
    for h in found["headings"]:
        if h["numbered"] and re.match(_TWICE, h["rest"]):
            problems.append(f"heading numbered twice: {h['text']!r}")
    for w in found["wide"]:
        problems.append(f"block wider than the page ({w['scroll']} > {w['client']} px, {w['what']}): "
                        f"{w['text']!r}")
    page = found["page"]
    if page["scroll"] > page["client"] + 1:
        problems.append(f"page scrolls sideways: {page['scroll']} > {page['client']} px")
    if screenshot is not None:
        _full_page_png(driver, Path(screenshot))
    return problems


def _full_page_png(driver, path, max_height=60000):
    """The whole page (up to `max_height` CSS px) as one PNG, through the DevTools protocol."""
    import base64

    height = driver.execute_script(
        "return Math.max(document.documentElement.scrollHeight, document.body.scrollHeight)")
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True,
        "clip": {"x": 0, "y": 0, "width": WIDTH, "height": min(height, max_height), "scale": 1},
    })
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(shot["data"]))
