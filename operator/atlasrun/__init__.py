"""AtlasRun: benchmark how LLM agents use tools over MCP.

One subpackage per stage, layered along the data flow. A module imports only from its
own layer or lower ones (the import-linter contract in pyproject.toml, checked by
``lint-imports`` in ``make check``), low to high:

1. ``errors``, ``naming``, ``redact``, ``flags``, ``http1``: user-facing errors; the ``{server}_{tool}``
   convention; secret masking at every write; CLI flags that error messages name; a minimal
   keep-alive HTTP/1.1 client (the provider's direct path)
2. ``tasks``, ``provider``: task files; LLM calls through litellm (or direct, for models litellm
   does not know at an OpenAI-compatible endpoint) with the retry policy
3. ``servers``: catalog, installer, server instances, the per-task tool surface
4. ``runspec``: the run spec (the same schema as the ``AtlasRun`` resource)
5. ``agent``: Agent protocol, litellm and replay agents, transcripts
6. ``judge``: Judge protocol, LLM claims judge, deterministic judge
7. ``scoring``: coverage and pass, result records and their store, summaries, statistics
8. ``diagnostics``: the 11-mode failure taxonomy, trace signals, diagnostic judge
9. ``runner``, ``interop``, ``reports``, ``starter``: the local engine; MCP-Atlas import and
   export; the HTML report; the starter suite's workspace
10. ``cluster``: run spec -> operator -> Jobs -> results (cluster mode)
11. ``commands``, ``cli``, ``testing``: the ``atlas`` command line; the scripted provider
"""

__version__ = "0.1.0"
