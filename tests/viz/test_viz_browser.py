"""The kernel graph viewer in a real headless browser: Chromium from the system packages, driven by Playwright through
its `executable_path` (no browser download). The page loads, lists the kernels of a known program, shows a kernel's
source after a click, and the keyboard moves the selection and the tabs. Set VIZ_SCREENSHOT=path to also keep a
1366x768 screenshot of a kernel's view there (what docs/ shows)."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator

import numpy as np
import pytest

from lazy import Tensor
from lazy.viz import recording
from lazy.viz.server import make_server

D = "CPU"
CHROMIUM = next((path for name in ("chromium", "chromium-browser") if (path := shutil.which(name))), None)


@pytest.fixture
def trace() -> dict:
    """A matmul, a relu and a sum: two kernels (the matmul's reduce is realized, since the sum after it has another
    size)."""
    rng = np.random.default_rng(0)
    a = Tensor(rng.standard_normal((64, 64), dtype=np.float32), device=D).realize()
    b = Tensor(rng.standard_normal((64, 64), dtype=np.float32), device=D).realize()
    with recording() as rec:
        (a @ b).relu().sum().realize()
    return {**rec.data(), "program": "tests/viz/test_viz_browser.py"}  # not pytest's command line


@pytest.fixture
def browser_page() -> Iterator:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("playwright is not installed (pip install playwright; no browser download is needed)")
    if CHROMIUM is None:
        pytest.skip("no Chromium on PATH (apt-get install chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            yield browser.new_page(viewport={"width": 1366, "height": 768})
        finally:
            browser.close()


def test_the_viewer_lists_kernels_shows_source_and_follows_the_keyboard(trace, browser_page, tmp_path):
    page = browser_page
    (r,) = trace["realizes"]
    kernels = [item for item in r["items"] if item["kind"] == "kernel"]
    programs = [trace["kernels"][k["digest"]]["programs"][k["program"]] for k in kernels]
    names = [p["name"] for p in programs]
    assert len(names) == 2 and all(name.startswith("r_") for name in names)
    server = make_server(trace, 0)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    requests: list[str] = []
    problems: list[str] = []
    page.on("request", lambda request: requests.append(request.url))
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("console", lambda msg: problems.append(msg.text) if msg.type == "error" else None)
    try:
        page.goto(server.url)
        page.wait_for_selector(".kitem.selected")
        assert page.locator(".kitem[data-kind=kernel] .kname").all_inner_texts() == names
        panel = lambda: page.eval_on_selector("#panel", "e => e.textContent")  # noqa: E731
        selected = lambda: page.eval_on_selector(".kitem.selected .kname", "e => e.textContent")  # noqa: E731
        # the mouse: a click on the second kernel shows its source (the Source tab is the first one shown)
        page.click(f".kitem[data-kind=kernel] >> text={names[1]}")
        assert selected() == names[1] and page.inner_text("#kname") == names[1]
        assert page.get_attribute("#tab-source", "aria-selected") == "true" and panel() == programs[1]["source"]
        # the keyboard: k/j move between kernels, digits and h/l between tabs, ? shows the help
        page.keyboard.press("k")
        assert selected() == names[0] and panel() == programs[0]["source"]
        page.keyboard.press("j")
        assert selected() == names[1]
        page.keyboard.press("1")
        assert page.get_attribute("#tab-ast", "aria-selected") == "true" and "SINK" in panel()
        page.keyboard.press("l")
        assert panel().startswith("optimisations (heuristics):")
        page.keyboard.press("ArrowUp")
        page.keyboard.press("4")
        assert selected() == names[0] and panel() == programs[0]["source"]
        page.keyboard.press("?")
        assert "open" in (page.get_attribute("#help", "class") or "")
        page.keyboard.press("Escape")
        assert "open" not in (page.get_attribute("#help", "class") or "")
        # a node of the graph: the matmul's reduce, which got memory, and why
        page.keyboard.press("f")
        page.click(f".node[data-node='{kernels[0]['output']}']")
        assert page.get_attribute("#tab-node", "aria-selected") == "true"
        assert "gets memory: reduce not fused" in panel()
        page.keyboard.press("4")
        shot = page.screenshot(path=str(tmp_path / "viewer.png"))
        assert shot[:8] == b"\x89PNG\r\n\x1a\n"
        if target := os.environ.get("VIZ_SCREENSHOT"):
            shutil.copyfile(tmp_path / "viewer.png", target)
    finally:
        server.shutdown()
        server.server_close()
    assert not problems, problems
    assert requests and all(url.startswith(server.url) for url in requests), "the page fetched from elsewhere"
