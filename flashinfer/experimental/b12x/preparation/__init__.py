"""Preparation: plans, and the session that selects, compiles, allocates and primes them.

See `plan.py` (Plan, PreparationRequest, handles) and `session.py` (PreparationSession).
"""
