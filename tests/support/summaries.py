"""Run records as experiments' summaries hold them, for the report and results tests."""


def a_run(**changes):
    """An incast run as summary.json holds it (a 16-sender default run), with changes."""
    run = {"scheme": "default", "senders": 16, "buffer_bytes": 85000, "sru_bytes": 262144,
           "goodput_mbps": 31.5, "fct_mean_ms": 250.0, "fct_p50_ms": 240.0, "fct_p95_ms": 300.0,
           "fct_p99_ms": 320.0, "drops": 120, "timeouts": 30, "probe_rtt_avg_ms": 5.2, "probe_rtt_max_ms": 9.9,
           "packet_bytes": 1500, "ceiling_mbps": 95.0, "full_ceiling_mbps": 95.0, "sent": 10000, "delivered": 9880,
           "drops_other_buffers": 0, "sender_queue_drops": 0, "unexplained": 0, "peak_backlog_bytes": 84000,
           "cpu_busy_pct": 60.0, "cpu_busiest_pct": 80.0, "cpu_softirq_pct": 12.0, "cpu_steal_pct": 0.4,
           "switch_cpu_pct": 71.0, "switch_pmd_busy_pct": None, "ce_marks": None,
           "generations": None, "backlog_empty_pct": 12.5,
           "backlog_empty_tail_pct": 30.0, "round_tail_pct": 15.0, "connections_unfinished_pct": 83.6,
           "switch_input_mean_bytes": 9200.0, "switch_input_busy_pct": 94.0}
    run.update(changes)
    return run
