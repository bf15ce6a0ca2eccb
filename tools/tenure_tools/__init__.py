"""tenure's internal test tools, kept out of the wheel: the lose-servers drill (`drill`), the
nftables fabric that cuts servers off (`fabric`), Celery worker and beat nodes (`celery_nodes`)
and certificates made at test time (`certs`, trustme). ``scripts/setup`` installs this
directory editable; the tests and the benchmarks import it."""
