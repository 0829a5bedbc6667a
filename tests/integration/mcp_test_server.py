"""A small MCP tool server for the tests (stdio by default; ``--http PORT`` for streamable HTTP)."""

from __future__ import annotations

import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

app = MCPServer("test-tools")


@app.tool(annotations=ToolAnnotations(idempotent_hint=True))
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@app.tool()
def fail(reason: str) -> str:
    """Always fails."""
    raise ValueError(reason)


@app.tool()
async def append_and_wait(log: str) -> str:
    """Append a line to ``log``, then wait until ``<log>.release`` exists (not idempotent)."""
    import anyio

    path = Path(log)
    with path.open("a") as out:  # noqa: ASYNC230 (one line appended to the test's own log file)
        out.write("run\n")
    release = path.with_name(path.name + ".release")
    while not release.exists():  # noqa: ASYNC110 (held until the test creates the file from its own process: no Event crosses processes)
        await anyio.sleep(0.02)
    return "released"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
