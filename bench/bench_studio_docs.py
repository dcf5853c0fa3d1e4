"""How long the API docs page (``/docs``) takes to load in a real Chromium, and what it costs.

Starts a server on 127.0.0.1 (a temporary workspace) and opens ``/docs`` ``--runs`` times,
each time in a fresh browser context (an empty cache, as a first visit has) signed in by a
login link, then once more in that context (warm). Prints per run and as medians:

- wall: navigation to the API's tags drawn (the page usable);
- cpu: the CPU seconds all of Chromium's processes spent from the navigation to a second
  after it (what the page costs; much steadier than wall time on a shared machine);
- how many tags and operations were drawn, and the size of ``/openapi.json``.

A measurement, never a gate::

    python bench/bench_studio_docs.py --runs 5 [--slow 4]

``--slow`` throttles the page's CPU (Chromium's emulation), as on a smaller machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "studio"))
from studio_support import CHROMIUM, CHROMIUM_ARGS, sign_in_by_link  # noqa: E402

from serverproc import start_server  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
SETTLE_MS = 1000


def descendants_cpu(root: int) -> float:
    """CPU seconds (user + system, with reaped children's) of every process below ``root``:
    the Playwright driver and the Chromium it started."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            raw = Path(f"/proc/{name}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        parents[int(name)] = int(fields[1])
        ticks[int(name)] = sum(int(value) for value in fields[11:15])
    total = 0
    for pid, spent in ticks.items():
        up = parents.get(pid, 0)
        while up not in (0, 1, root) and up in parents:
            up = parents[up]
        if up == root:
            total += spent
    return total / TICK


def one_load(page: Any, url: str) -> tuple[float, float, int, int]:
    """(wall, cpu, tags, operations) of one load of ``/docs``."""
    cpu = descendants_cpu(os.getpid())
    started = time.perf_counter()
    page.goto(url + "/docs", wait_until="commit")
    page.wait_for_selector(".opblock-tag", timeout=60_000)
    wall = time.perf_counter() - started
    page.wait_for_timeout(SETTLE_MS)
    cpu = descendants_cpu(os.getpid()) - cpu
    return wall, cpu, page.locator(".opblock-tag").count(), page.locator(".opblock").count()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--slow", type=float, default=1.0, help="CPU throttling of the page")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp))
        try:
            size = len(httpx.get(server.url + "/openapi.json", headers=server.headers).content)
            print(f"/openapi.json: {size / 1024:.0f} KiB; load average {os.getloadavg()[0]:.1f}")
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                cold: list[tuple[float, float]] = []
                warm: list[tuple[float, float]] = []
                for run in range(args.runs):
                    context = browser.new_context(viewport={"width": 1280, "height": 900})
                    page = context.new_page()
                    if args.slow > 1:
                        cdp = context.new_cdp_session(page)
                        cdp.send("Emulation.setCPUThrottlingRate", {"rate": args.slow})
                    sign_in_by_link(page, server)
                    wall, cpu, tags, operations = one_load(page, server.url)
                    again, again_cpu, _, _ = one_load(page, server.url)
                    context.close()
                    cold.append((wall, cpu))
                    warm.append((again, again_cpu))
                    print(f"run {run + 1}: cold {wall:.2f} s wall, {cpu:.2f} s cpu; "
                          f"warm {again:.2f} s wall, {again_cpu:.2f} s cpu; "
                          f"{tags} tags, {operations} operations drawn")  # fmt: skip
                browser.close()
            for label, runs in (("cold", cold), ("warm", warm)):
                print(f"median {label}: {statistics.median(w for w, _ in runs):.2f} s wall, "
                      f"{statistics.median(c for _, c in runs):.2f} s cpu")  # fmt: skip
        finally:
            server.stop()


if __name__ == "__main__":
    main()
