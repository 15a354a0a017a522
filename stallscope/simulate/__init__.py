"""Discrete-event simulator of an iteration-level LLM engine, and emitters of real-format artifacts (issue 4)."""
