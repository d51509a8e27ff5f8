"""Load a local page in headless Chromium and report what a person would see and what broke.

Chromium is driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`: commands on
fd 3, answers on fd 4, each message JSON ending in a NUL byte), so no port is opened and nothing
but the standard library is needed. `load_page` returns the screenshot of the viewport, every
console message, every uncaught exception, every browser log entry (a failed resource load is
one), every URL the page requested and the natural width of every <img> (0 = not decoded).

Also a tool: `python -m tests.chromium reports/run.html docs/report.png --height 2200` writes the
screenshot docs/report.md shows.
"""
import base64
import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

# The flags the issue asks for, plus the ones that keep a fresh profile quiet and offline.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--disable-default-apps", "--disable-dev-shm-usage", "--hide-scrollbars",
         "--mute-audio", "--remote-debugging-pipe"]
CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
PAGE_FACTS = """JSON.stringify({
  images: Array.from(document.images).map(i => i.naturalWidth),
  sections: Array.from(document.querySelectorAll("section[id]")).map(s => s.id),
  height: document.documentElement.scrollHeight,
  title: document.title})"""


def find_chromium() -> str | None:
    for name in CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One headless Chromium process and its DevTools pipe."""

    def __init__(self, executable: str, width: int, height: int, timeout: float = 60.0):
        self.timeout, self.buffer, self.next_id, self.events = timeout, b"", 0, []
        self.profile = tempfile.mkdtemp(prefix="chromium-profile-")
        cmd_read, self.cmd_write = os.pipe()
        self.res_read, res_write = os.pipe()

        def wire_fds():  # in the child: our pipe ends become fds 3 and 4
            a, b = os.dup(cmd_read), os.dup(res_write)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.stderr = tempfile.TemporaryFile()  # a file, not a pipe: chatter can never block it
        self.proc = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self.profile}",
             f"--window-size={width},{height}", "about:blank"],
            preexec_fn=wire_fds, pass_fds=(3, 4), stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=self.stderr)
        os.close(cmd_read)
        os.close(res_write)

    def send(self, method, params=None, session=None) -> int:
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self.cmd_write, json.dumps(message).encode() + b"\0")
        return self.next_id

    def wait_for(self, predicate) -> dict:
        deadline = time.monotonic() + self.timeout
        while True:
            while b"\0" in self.buffer:
                raw, self.buffer = self.buffer.split(b"\0", 1)
                message = json.loads(raw)
                self.events.append(message)
                if predicate(message):
                    return message
            ready, _, _ = select.select([self.res_read], [], [],
                                        max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError(f"chromium did not answer within {self.timeout:.0f}s")
            chunk = os.read(self.res_read, 1 << 20)
            if not chunk:
                self.stderr.seek(0)
                err = self.stderr.read().decode(errors="replace")[-2000:]
                raise RuntimeError(f"chromium closed its DevTools pipe:\n{err}")
            self.buffer += chunk

    def call(self, method, params=None, session=None) -> dict:
        request = self.send(method, params, session)
        answer = self.wait_for(lambda m: m.get("id") == request)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]

    def close(self):
        try:
            self.send("Browser.close")
            self.proc.wait(timeout=10)
        except Exception:  # noqa: BLE001 - a dead browser is closed enough
            self.proc.kill()
            self.proc.wait()
        finally:
            os.close(self.cmd_write)
            os.close(self.res_read)
            self.stderr.close()
            shutil.rmtree(self.profile, ignore_errors=True)


def load_page(path, executable: str | None = None, width: int = 1280, height: int = 2000,
              full_page: bool = False, offline: bool = False, settle: str | None = None) -> dict:
    """Open file://<path>, wait for its load event, and return what happened (see module doc).
    offline: the network is switched off (DevTools' network emulation) before the page loads.
    settle: a JavaScript expression evaluated after the load event, awaited when it is a
    promise (a page that draws asynchronously); its JSON-able value is returned as "settled"."""
    executable = executable or find_chromium()
    if not executable:
        raise FileNotFoundError("no chromium executable on PATH")
    url = Path(path).resolve().as_uri()
    browser = Browser(executable, width, height)
    try:
        target = browser.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.call("Target.attachToTarget",
                               {"targetId": target, "flatten": True})["sessionId"]
        browser.call("Emulation.setDeviceMetricsOverride",
                     {"width": width, "height": height, "deviceScaleFactor": 1,
                      "mobile": False}, session)
        for domain in ("Page", "Runtime", "Log", "Network"):
            browser.call(f"{domain}.enable", session=session)
        if offline:
            browser.call("Network.emulateNetworkConditions",
                         {"offline": True, "latency": 0, "downloadThroughput": -1,
                          "uploadThroughput": -1}, session)
        browser.call("Page.navigate", {"url": url}, session)
        browser.wait_for(lambda m: m.get("method") == "Page.loadEventFired")
        settled = None
        if settle:
            settled = browser.call("Runtime.evaluate", {
                "expression": settle, "returnByValue": True, "awaitPromise": True},
                session)["result"].get("value")
        facts = json.loads(browser.call("Runtime.evaluate", {
            "expression": PAGE_FACTS, "returnByValue": True}, session)["result"]["value"])
        shot = {"format": "png"}
        if full_page:
            shot.update(captureBeyondViewport=True,
                        clip={"x": 0, "y": 0, "width": width, "height": facts["height"],
                              "scale": 1})
        png = base64.b64decode(browser.call("Page.captureScreenshot", shot, session)["data"])
        events = list(browser.events)
    finally:
        browser.close()

    def params(name):
        return [e["params"] for e in events if e.get("method") == name]

    return {
        "screenshot": png,
        "console": [(p["type"], " ".join(str(a.get("value", a.get("description", "")))
                                          for a in p.get("args", [])))
                    for p in params("Runtime.consoleAPICalled")],
        "exceptions": [e.get("exception", {}).get("description") or e.get("text")
                       for e in (p["exceptionDetails"] for p in params("Runtime.exceptionThrown"))],
        "log": [(p["entry"]["level"], p["entry"]["text"]) for p in params("Log.entryAdded")],
        "requests": [p["request"]["url"] for p in params("Network.requestWillBeSent")],
        "failed": [p.get("errorText") for p in params("Network.loadingFailed")],
        "settled": settled,
        **facts,
    }


def main():
    import argparse

    parser = argparse.ArgumentParser(description="Screenshot a local HTML page with headless "
                                                 "Chromium (offline).")
    parser.add_argument("page")
    parser.add_argument("png")
    parser.add_argument("--width", type=int, default=1280)
    parser.add_argument("--height", type=int, default=2000,
                        help="viewport height; the screenshot is the viewport")
    parser.add_argument("--full-page", action="store_true", help="the whole page instead")
    parser.add_argument("--colours", type=int, default=0,
                        help="quantise to this many colours (a smaller PNG for docs); 0 = keep")
    args = parser.parse_args()
    result = load_page(args.page, width=args.width, height=args.height,
                       full_page=args.full_page)
    png = result["screenshot"]
    if args.colours:
        import io

        from PIL import Image

        image = Image.open(io.BytesIO(png)).convert("RGB").quantize(
            colors=args.colours, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
        buf = io.BytesIO()
        image.save(buf, format="png", optimize=True)
        png = buf.getvalue()
    Path(args.png).parent.mkdir(parents=True, exist_ok=True)
    Path(args.png).write_bytes(png)
    problems = result["exceptions"] + [m for m in result["console"] if m[0] == "error"]
    print(f"{args.png}: {len(png):,} bytes; page height {result['height']}px; "
          f"problems: {problems or 'none'}")


if __name__ == "__main__":
    main()
