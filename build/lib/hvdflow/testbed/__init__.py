"""A real test bed on one machine, for tests and demos: a Slurm cluster with nodes in namespaces and accounting
(``cluster``, its configs in ``config``), and Debian's docker-registry on 127.0.0.1 (``registry_server``).

Imports only :mod:`hvdflow.errors`; nothing in the workflow imports it.
"""
