"""servepack: pin → pull → serve → measure → smoke-test → record → compare."""

__version__ = "0.1.0"
