"""Files, the bottom floor: atomic writes, sha256 and cache keys, file locks, strict YAML loading.

Owns nothing of hvdflow's domain; imports only the standard library, PyYAML and :mod:`hvdflow.errors`.
"""
