"""Model sources (hf, pypi, file), sha256 verification and the GGUF header."""
