"""``atlas view``: a live local web page of results directories.

``status`` reads a run's progress and numbers through the store readers and the scoring modules;
``pages`` renders the pages (the task drill-down and the full report are the report's own
renderers); ``server`` serves them from 127.0.0.1 with the standard library, routing only the
pages it generates (no file is served from a path in a URL).
"""
