"""A sample agent loop on the `openai` SDK against a servepack-served endpoint, with Layer B's sandboxed tools.

    servepack serve                      # prints the base URL, e.g. http://127.0.0.1:8000
    python examples/agent_client.py --base-url http://127.0.0.1:8000 "Create notes.md listing three fruits"

The tools act on a fresh temporary workspace (files, a no-network shell, memory, cron); nothing outside it
is touched. Each tool call and its result are printed, then the final answer. A call the model writes into
its text instead of `tool_calls` is still executed (and said so) unless --strict is given.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from openai import OpenAI

from servepack.smoke.layer_b.cases import WorldSpec
from servepack.smoke.layer_b.episode import DEFAULT_SYSTEM
from servepack.smoke.layer_b.tools import DEFAULT_SHELL, SCHEMAS, execute
from servepack.smoke.layer_b.world import World
from servepack.smoke.scorer import calls_in_content

TOOLS = ["read_file", "write_file", "patch", "search_files", "terminal", "memory", "cronjob"]


def _calls(message: Any, strict: bool) -> list[tuple[str, str, Any]]:
    """(id, name, arguments) of the message's tool calls; leaked ones from its text unless strict."""
    if message.tool_calls:
        return [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls]
    if strict or not message.content:
        return []
    leaked = calls_in_content(message.content)
    if leaked:
        print("  (the model wrote its tool call into the text; executing it anyway)")
    return [(f"leaked_{i}", str(c["name"]), c["arguments"]) for i, c in enumerate(leaked)]


def _run_call(world: World, name: str, raw: Any, step: int) -> str:
    if name not in TOOLS:
        return json.dumps({"error": f"unknown tool {name!r}; available: {', '.join(TOOLS)}"})
    try:
        args = json.loads(raw) if isinstance(raw, str) else dict(raw or {})
    except (json.JSONDecodeError, TypeError, ValueError):
        return json.dumps({"error": "arguments are not a JSON object"})
    if not isinstance(args, dict):
        return json.dumps({"error": "arguments are not a JSON object"})
    try:
        return execute(world, name, args, step=step).text
    except KeyError as exc:  # a required argument is missing
        return json.dumps({"error": f"missing argument {exc}"})


def run_agent(base_url: str, task: str, *, model: str | None, max_steps: int, max_tokens: int, strict: bool) -> int:
    """Run the loop; 0 when the model gave a final answer within max_steps, 1 otherwise."""
    client = OpenAI(base_url=f"{base_url.rstrip('/').removesuffix('/v1')}/v1", api_key="sk-local")
    model = model or client.models.list().data[0].id
    world = World.create(WorldSpec(), default_shell=DEFAULT_SHELL)
    print(f"model: {model}\nworkspace: {world.workspace}")
    messages: list[dict[str, Any]] = [{"role": "system", "content": DEFAULT_SYSTEM}, {"role": "user", "content": task}]
    try:
        for step in range(max_steps):
            reply = client.chat.completions.create(
                model=model,
                messages=messages,  # type: ignore[arg-type]
                tools=[SCHEMAS[n] for n in TOOLS],  # type: ignore[misc]
                temperature=0.0,
                max_tokens=max_tokens,
            )
            message = reply.choices[0].message
            calls = _calls(message, strict)
            if not calls:
                print(f"final answer: {(message.content or '').strip()}")
                return 0
            history = []
            results = []
            for call_id, name, raw in calls:
                print(f"tool call: {name}({raw if isinstance(raw, str) else json.dumps(raw)})")
                text = _run_call(world, name, raw, step)
                print(f"  result: {text[:300]}")
                arguments = raw if isinstance(raw, str) else json.dumps(raw)
                history.append({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})
                results.append({"role": "tool", "tool_call_id": call_id, "content": text})
            messages.append({"role": "assistant", "content": "", "tool_calls": history})
            messages.extend(results)
        print(f"no final answer after {max_steps} steps")
        return 1
    finally:
        world.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("task", help="what the agent should do")
    parser.add_argument("--base-url", required=True, help="server base URL as `servepack serve` prints it")
    parser.add_argument("--model", default=None, help="model name (default: the server's first model)")
    parser.add_argument("--max-steps", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--strict", action="store_true", help="do not execute tool calls written into text")
    args = parser.parse_args(argv)
    return run_agent(
        args.base_url,
        args.task,
        model=args.model,
        max_steps=args.max_steps,
        max_tokens=args.max_tokens,
        strict=args.strict,
    )


if __name__ == "__main__":
    sys.exit(main())
