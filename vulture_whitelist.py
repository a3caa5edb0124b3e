"""Names `vulture` (make check-lint) reports as unused that are used, each with where from.

Not imported by anything: vulture only reads it. Regenerate candidates with
``.venv/bin/vulture operator/atlasrun vulture_whitelist.py --make-whitelist``; add a name here
only with the reason it is live, and delete what is really dead instead.
"""

# -- pydantic: model configuration, validators (decorated, called by pydantic) and post-init hooks
_.model_config
_._one_source  # runspec.run.TasksSource
_._kind_matches_status  # scoring.result.TaskResult
_._known  # diagnostics.model.Diagnosis
_._consistent  # diagnostics.model.Diagnosis
_._primary  # diagnostics.judge
_._confidence  # diagnostics.judge
_.model_post_init  # servers.catalog.ServerSpec
_._backend_url  # runspec.run.ServersSpec
_._without_defaults  # runspec.run
__context  # its argument (pydantic's signature)

# -- fields of persisted or exchanged records: written as JSON and read by people, reports and
#    other tools (results lines, transcripts, summary.json, run.json, AtlasRun status)
_.schema_version
_.agent  # transcript
_.started_s  # transcript, tool-call records
_.truncated  # tool-call records, termination messages
_.infra  # termination messages (cluster/wire/records.py)
_.imported_from  # run.json
_.api_version  # the run file's apiVersion
_.excluded_by_kind  # summary.json
_.judge_failed_claims_zeroed  # summary.json (scoring.judgeFailure: zero)
_.judged_by  # claim verdicts in per-task JSON (which judge of a chain labelled the claim)
_.excluded_reasons
_.error_reasons
_.mean_coverage
_.mean_coverage_ci
_.pass_rate_at
_.mean_tool_calls
_.mean_wall_s
_.tasks_without_calls  # tool metrics
_.mean_valid_name_rate
_.mean_schema_compliance
_.mean_execution_success
_.mean_turns
_.mean_tokens
_.last_transition_time  # AtlasRun status (cluster/operator/crd.py: the CRD's status schema)
_.observed_generation
_.coverage_sum
_.excluded_items
_.pass_rates
_.start_time
_.completion_time

# -- frameworks calling by name
_.run_event  # cluster/operator/main.py: kopf handlers (registered by decorator)
_.do_POST  # testing/scripted_provider.py, reports/view/server.py: http.server's handler hooks
_.do_GET
_.do_HEAD
_.handle_error
_.server_version
_.sys_version
_.log_message
_.protocol_version
_.daemon_threads
_.ignore_aliases  # cluster/operator/crd.py: yaml.SafeDumper hook
_._one_data_root  # runspec/run.py: a pydantic model validator
_.suppress_debug_info  # provider.py: litellm module settings
_.telemetry
__getattr__  # diagnostics/__init__.py: PEP 562 lazy module attributes
_.collect  # cluster/operator/metrics.py: prometheus_client's Collector protocol (called at each scrape)
_.describe  # cluster/operator/metrics.py: the Collector protocol (called at registration)

# -- library helpers exercised directly by the tests (no production caller today)
_.is_pinned  # cluster/operator/images.py (tests/test_images.py: Dockerfile FROMs and images.lock)
_.settings_table  # cluster/operator/settings.py: docs/architecture.md's table (tests/test_operator_settings.py)

# -- pool counters: read by bench/workload.py (the pool counts per run) and tests/test_pool.py
_.data_copied  # servers.instance.Instance
_.refreshed  # servers.pool
_.refresh_copies
_.refresh_failures
_.last_refresh_error
