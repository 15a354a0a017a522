"""Open a page in headless Chromium over the DevTools protocol and report what a reader's browser would see:
console errors, network requests, images that did not decode, and a full-page screenshot.

Chromium is Debian's `chromium` (the Makefile installs it); the protocol client is `websocket-client`."""
from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-quic",
         "--disable-default-apps", "--disable-extensions", "--no-default-browser-check", "--mute-audio",
         "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "--remote-allow-origins=*",
         "--window-size=1280,900"]


def find_chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        p = shutil.which(name)
        if p:
            return p
    return None


@dataclass
class PageCheck:
    url: str
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # every request other than the page itself
    dialogs: list[str] = field(default_factory=list)
    images: list[dict] = field(default_factory=list)  # {src_kind, complete, natural_width, natural_height}
    scripts: int = 0
    body_text_chars: int = 0
    width: int = 0
    height: int = 0
    screenshot: bytes = b""


class _Cdp:
    def __init__(self, ws_url: str):
        import websocket

        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self.ids = itertools.count(1)
        self.events: list[dict] = []

    def call(self, method: str, **params) -> dict:
        i = next(self.ids)
        self.ws.settimeout(60)  # wait_for and drain leave short timeouts behind; a full-page screenshot takes a while
        self.ws.send(json.dumps({"id": i, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == i:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_for(self, method: str, timeout: float) -> None:
        end = time.monotonic() + timeout
        if any(e.get("method") == method for e in self.events):
            return
        while time.monotonic() < end:
            self.ws.settimeout(max(0.1, end - time.monotonic()))
            msg = json.loads(self.ws.recv())
            self.events.append(msg)
            if msg.get("method") == method:
                return
        raise TimeoutError(f"no {method} within {timeout} s")

    def drain(self, seconds: float) -> None:
        import websocket

        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.ws.settimeout(max(0.05, end - time.monotonic()))
            try:
                self.events.append(json.loads(self.ws.recv()))
            except websocket.WebSocketTimeoutException:
                return

    def close(self) -> None:
        self.ws.close()


def check_page(path: Path, chromium: str, timeout: float = 60.0) -> PageCheck:
    """Load `path` from disk in a fresh headless Chromium profile and collect what went wrong."""
    url = Path(path).resolve().as_uri()
    profile = tempfile.mkdtemp(prefix="stallscope-chromium-")
    proc = subprocess.Popen([chromium, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = Path(profile) / "DevToolsActivePort"
        end = time.monotonic() + timeout
        while not port_file.exists() or len(port_file.read_text().splitlines()) < 2:
            if proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {proc.returncode} before opening DevTools")
            if time.monotonic() > end:
                raise TimeoutError("chromium did not open its DevTools port")
            time.sleep(0.1)
        port = int(port_file.read_text().splitlines()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            targets = json.load(r)
        page = next(t for t in targets if t.get("type") == "page")
        cdp = _Cdp(page["webSocketDebuggerUrl"])
        try:
            return _inspect(cdp, url, timeout)
        finally:
            cdp.close()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(profile, ignore_errors=True)


def _inspect(cdp: _Cdp, url: str, timeout: float) -> PageCheck:
    for domain in ("Network", "Runtime", "Log", "Page"):
        cdp.call(f"{domain}.enable")
    cdp.events.clear()
    cdp.call("Page.navigate", url=url)
    cdp.wait_for("Page.loadEventFired", timeout)
    cdp.drain(1.0)  # late console messages, lazy requests
    res = PageCheck(url=url)
    facts = cdp.call("Runtime.evaluate", returnByValue=True, expression="""(() => ({
        images: Array.from(document.images).map(i => ({src_kind: i.src.split(':')[0], complete: i.complete,
                                                      natural_width: i.naturalWidth, natural_height: i.naturalHeight})),
        scripts: document.scripts.length,
        text: document.body ? document.body.innerText.length : 0,
        width: document.documentElement.scrollWidth, height: document.documentElement.scrollHeight}))()""")
    v = facts["result"]["value"]
    res.images, res.scripts, res.body_text_chars = v["images"], v["scripts"], v["text"]
    res.width, res.height = v["width"], v["height"]
    shot = cdp.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                    clip={"x": 0, "y": 0, "width": min(res.width, 1280), "height": min(res.height, 16000),
                          "scale": 1})
    import base64

    res.screenshot = base64.b64decode(shot["data"])
    cdp.drain(0.3)
    for e in cdp.events:
        m, p = e.get("method"), e.get("params", {})
        if m == "Network.requestWillBeSent":
            u = p.get("request", {}).get("url", "")
            if u != url and not u.startswith("data:"):
                res.requests.append(u)
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert", "warning"):
            res.console_errors.append(" ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
        elif m == "Runtime.exceptionThrown":
            res.console_errors.append(str(p.get("exceptionDetails", {}).get("text")))
        elif m == "Log.entryAdded" and p.get("entry", {}).get("level") in ("error", "warning"):
            res.console_errors.append(p["entry"].get("text", ""))
        elif m == "Page.javascriptDialogOpening":
            res.dialogs.append(p.get("message", ""))
    return res


def blank_fraction(png: bytes) -> float:
    """Share of the screenshot's pixels that are (near) the page background colour."""
    import io

    import numpy as np
    from PIL import Image

    a = np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=np.int16)
    bg = np.bincount(a.ravel(), minlength=256).argmax()
    return float((np.abs(a - bg) <= 8).mean())


if __name__ == "__main__":  # python tests/browser.py report.html shot.png
    import sys

    chk = check_page(Path(sys.argv[1]), find_chromium() or "chromium")
    if len(sys.argv) > 2:
        Path(sys.argv[2]).write_bytes(chk.screenshot)
    print(json.dumps({k: v for k, v in chk.__dict__.items() if k != "screenshot"}, indent=1))
    print("blank fraction", blank_fraction(chk.screenshot), os.path.getsize(sys.argv[1]))
