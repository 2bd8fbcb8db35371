"""The pure part of `servepack reproduce`: a record's launch as a local preset, its protocol, the verdicts."""
