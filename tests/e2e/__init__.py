"""End-to-end tests (a package, so the embedded server's fixtures can have package scope: see conftest.py)."""
