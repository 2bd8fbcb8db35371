"""Layer B v3: agent episodes whose tool calls are executed against a sandboxed world, then judged.

Modules:

- `cases`: Layer B case schema (initial world, expected end state, golden script) and the loader of the shipped
  cases.
- `episode`: The Layer B loop: model → tool calls → executed results → … until a text answer or the step limit.
- `judge`: Judges a finished Layer B episode: the world's end state, forbidden actions, and the final answer.
- `runner`: Runs the Layer B suite against a server: one executed episode per case, mode and repeat.
- `tools`: Layer B's tool registry: OpenAI function schemas (Hermes-agent-class) and their execution against a
  World.
- `world`: The sandboxed world a Layer B episode acts on: a temp workspace, a scripted web and browser, memory,
  cron.
"""

from servepack.smoke.layer_b.runner import run_layer_b

__all__ = ["run_layer_b"]
