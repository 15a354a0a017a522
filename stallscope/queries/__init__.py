"""Analyses as SQL: one documented view or table macro per .sql file, loaded by stallscope's orchestration."""
