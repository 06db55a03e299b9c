"""The development kit: test, benchmark and GPU-kit helpers kept out of the shipped wheel.

Imported by tests (pytest's ``pythonpath``), ``benchmarks/`` and ``scripts/`` from the
repository root; ``mtpstudio`` never imports it (``tests/test_architecture.py``).
"""
