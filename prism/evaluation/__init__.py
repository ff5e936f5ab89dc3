"""Evaluation users run: rolling-origin backtests, accuracy metrics and capacity-planning backtests.

Benchmarks that measure PRISM (speed, memory, the accuracy study) live in the top-level
``evaluation/`` folder; they import this package, never the reverse.
"""
