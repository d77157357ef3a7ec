"""What becomes of runs once measured: statistics, the results files, plots and results pages.

- ``stats``: pure statistics of runs (goodput, percentiles, the queue's emptiness, Jain's index, ...);
- ``results``: the summary's schema, ``Outcome``, OUT/summary.json, the SQLite store and OUT/routes/;
- ``plots``: the PNG plots, failed runs marked;
- ``report``: Markdown tables and results pages from summaries (``otcp-experiment report``).
"""
