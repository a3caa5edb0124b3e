"""AtlasRun: benchmark how LLM agents use tools over MCP.

Data flow, one subpackage per stage:
tasks -> servers -> agent -> judge -> scoring -> reports, driven by runner (local)
and, in cluster mode, by the operator (run spec -> Jobs -> results).
"""

__version__ = "0.1.0"
