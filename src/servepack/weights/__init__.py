"""Model sources (hf, pypi, file), sha256 verification and the GGUF header.

Modules:

- `extras`: Extra files a preset needs beside the model (a speculative-decoding draft), found where `pull` put them.
- `gguf`: A small GGUF header reader: metadata, tensor infos, and where the tensor data starts.
- `hashcache`: sha256 of a file, hashed once per file identity and re-hashed whenever that identity changes.
- `hf`: `servepack pull`: a pack's pinned Hugging Face files through huggingface_hub, verified against the pin.
- `resolve`: Resolve a pack's model pin to a verified file on disk.
- `twin`: Shape twins: a real GGUF header followed by random tensor bytes — for speed only, never quality.
"""
