"""Policy domain: schedules, durations, elastic decisions, switch plans, QOS."""
