"""Reliability: concurrent placers, faults and crashes against real SQLite, PostgreSQL and OPA."""
