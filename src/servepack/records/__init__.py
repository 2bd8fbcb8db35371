"""Records: result schemas, append-only results directories, receipts, MEASURED.md, registry format."""
