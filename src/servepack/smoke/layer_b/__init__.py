"""Layer B v3: agent episodes whose tool calls are executed against a sandboxed world, then judged."""

from servepack.smoke.layer_b.runner import run_layer_b

__all__ = ["run_layer_b"]
