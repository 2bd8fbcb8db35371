"""Secrets in flags, argv, environment and records never reach a file servepack writes, nor a message it shows.

The rule, one for every writer (receipt.json, tune.json, trials.jsonl, reproduce.json, capacity.json, engine logs,
registry records, error messages):

- **Names.** A name holds a secret when its last dash- or underscore-separated part (or the one before a last
  `file`/`path`) is `key`/`keys`, `api-key`, `apikey`, `token`, `secret`, `password`, `passwd`, `pass`, `auth`,
  `credential`, `bearer` or `cookie`, or it is `hft` (`names.is_secret_name`, which is the flag policy's
  `packs.flag_policy.is_secret_flag`: one rule for redaction and tune spaces): `--api-key`, `--api-key-file`,
  `--ssl-key-file`, `--hf-token`, `LLAMA_API_KEY`, `"api_key"`. The word inside a name is a near-miss, not a secret
  (`--long-prefill-token-threshold`); `tokens` (plural) is a count (`--image-max-tokens`, `n_tokens`). The
  receipt's record of the environment also takes a variable whose name ends in one of them glued (`HFTOKEN`:
  variable names glue words). A value that only names a variable of the launching shell (`${HF_TOKEN:-}`,
  `$HF_TOKEN`; `names.is_reference`) holds no secret and is kept.
- **Switches are not secrets.** A value that only turns something on or off — `true`/`false`, `yes`/`no`,
  `on`/`off`, `1`/`0`, empty, `bool:true`/`bool:false` (any case, quoted or not), a boolean, the numbers 0 and 1 —
  is kept whatever the name: `HF_HUB_DISABLE_IMPLICIT_TOKEN=1` is a switch about tokens. This opens no hole: a key
  that is one of these words is guessed in one try, so showing it gives nothing away. Every other value under such
  a name is a secret, numbers too where a server flag takes them (`api-key = 12345` in a pack, `--api-key 12345`);
  a JSON number in a registry record is a figure (`time_per_output_token_ms`), never taken for a key.
- **By name, whatever the length.** A secret value is replaced by `<redacted>` wherever its name travels with it,
  even a value of one character: preset flags (`redact_flags`), argv in both spellings (`--api-key abc`,
  `--api-key=abc`; `redact_argv`), a JSON document (`redact_document`: a field `"api_key": "abc"`, an env
  object, `{"name": "HF_TOKEN", "value": …}`, the value after such a flag in a list of strings), and text
  (`redact_text`: `--api-key abc`, `--api-key=abc`, `LLAMA_API_KEY=abc`, `api_key='abc'`, `"api_key": "abc"`,
  `'api_key': ['abc']`, an argv printed as a list `'--api-key', 'abc'`, a YAML line `admin_key: abc` — the rest of
  the line less a ` # comment`, a quoted value, a `[a, b]` list, a `|` block's lines; at a line's start, inside a
  quoted string or opening a `{…}` mapping, never inside a sentence — and a TOML pair `api-key = "abc"`, also
  dotted or in an inline table). A list of strings in a record (a template engine profile's config lines) is read
  as the lines of one text. Engine logs are rewritten so after every run (`scrub_file`, from the session's
  `finally`), and so are the error and the notes a receipt keeps and the error a session raises.
- **What is shown.** An error the CLI prints (`scrub_shown`): an internal error (exit 70) and every `--debug`
  traceback lose each secret value registered in this process (`store.registered_secrets`, by value, at least
  `MIN_SCRUB_LEN`) and every value a name marks; servepack's own error messages lose the registered values. A
  report section that could not be drawn says why the same way. `pack show` prints a pack with each preset's
  secret as `<redacted>` (`redact_pack`, `redact_pack_text`); `--reveal-secrets` prints the file as it is.
- **By value, from free text.** Where no name says what a value is (an engine's log line quoting the key alone, an
  error message), the values themselves are removed: those at least `MIN_SCRUB_LEN` (4) characters long from logs
  and messages, those at least `store.MIN_SECRET_LEN` (8) long from every byte `store` writes (registered by
  `store.register_secrets`; a shorter value could be part of a hash or a figure there). Removing "abc" everywhere
  would mangle the text and tell a reader the key, so a value shorter than that is safe only where its name travels
  with it — which is every place servepack itself writes one.
- **Messages quoting a record** (`registry check`, an import refused, a record file `reproduce` reads): each of
  the record's secret values, whatever its length, is removed from the message where it stands as a word of its
  own, then by name (`document_secrets`, `scrub_message`); the verdict is the record's own, as it was given.
- **Where a secret is not wanted at all**, it is refused: a tune space (`flag_policy.secret_flag_problem`), a pack
  file `tune --write-pack` writes (`tune.userpack`). tune.json keeps the base preset's flags redacted; a trial, the
  compare and `--resume` take the secret from the pack again.

Where each part lives: the names and values that are secrets, in flags and argv (`names`); the rules that find them
in free text — flags, assignments, quoted keys, YAML and TOML lines (`text`); a JSON document and the messages that
quote one (`document`); what is shown and what is rewritten (`shown`: errors, `pack show`, engine logs).
"""

from servepack.packs.flag_policy import is_secret_flag
from servepack.redact.document import document_secrets, redact_document, redact_record_bytes, scrub_message
from servepack.redact.names import (
    MAX_KEY_FILE_BYTES,
    MIN_SCRUB_LEN,
    SWITCH_VALUES,
    env_holds_secret,
    holds_secret,
    is_reference,
    is_secret_name,
    is_switch,
    redact_argv,
    redact_flags,
    secret_values,
)
from servepack.redact.shown import redact_pack, redact_pack_text, scrub_file, scrub_shown
from servepack.redact.text import redact_text, scrub_text
from servepack.store import REDACTED

__all__ = [
    "MAX_KEY_FILE_BYTES",
    "MIN_SCRUB_LEN",
    "REDACTED",
    "SWITCH_VALUES",
    "document_secrets",
    "env_holds_secret",
    "holds_secret",
    "is_reference",
    "is_secret_flag",
    "is_secret_name",
    "is_switch",
    "redact_argv",
    "redact_document",
    "redact_flags",
    "redact_pack",
    "redact_pack_text",
    "redact_record_bytes",
    "redact_text",
    "scrub_file",
    "scrub_message",
    "scrub_shown",
    "scrub_text",
    "secret_values",
]
