"""The tests, laid out like the package: ``tests/<package>/test_<module>.py`` tests
``slurm_mig/<package>/<module>.py`` (``tests/test_<module>.py`` a top-level module),
``tests/benchmarks/`` the scripts of ``benchmarks/``, ``tests/e2e/`` a real Slurm.

The shared helpers (``support``, ``fake_pynvml``) live in this folder; pytest puts it
on ``sys.path`` for this conftest, so every test imports them by name."""
