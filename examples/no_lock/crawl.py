"""Not crawling a URL twice: dedup by key in a table, no lock.

Three crawler threads find links and each may find the same URL. Before fetching, a crawler
inserts the URL into ``seen``; the primary key lets the first insert in and turns the others
into no-ops (``ON CONFLICT DO NOTHING``), so a URL is fetched by whoever inserted it, once.
(A Redis set does the same: ``SADD`` answers 1 only to the first.)

    python examples/no_lock/crawl.py
"""

from __future__ import annotations

import sqlite3
import tempfile
import threading
from pathlib import Path

FOUND = ["https://example.org/", "https://example.org/a", "https://example.org/b"]


def crawler(db: Path, start: threading.Barrier, fetched: list[str]) -> None:
    conn = sqlite3.connect(db, timeout=30, isolation_level=None)
    start.wait()
    for url in FOUND:  # every crawler found every link
        first = conn.execute(
            "INSERT INTO seen (url) VALUES (?) ON CONFLICT (url) DO NOTHING", (url,)
        ).rowcount
        if first:
            fetched.append(url)  # fetch it: nobody else will
    conn.close()


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "crawl.db"
        sqlite3.connect(db, isolation_level=None).execute(
            "CREATE TABLE seen (url TEXT PRIMARY KEY)"
        )
        start, fetched = threading.Barrier(3), []
        threads = [threading.Thread(target=crawler, args=(db, start, fetched)) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for url in sorted(fetched):
            print(f"fetched {url}")
        print(f"{len(fetched)} fetches for {len(FOUND)} URLs found by 3 crawlers")


if __name__ == "__main__":
    main()
