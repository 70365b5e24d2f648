"""A delay line for the benches: a TCP proxy on loopback that holds every byte a client sends for a fixed time before
it passes it on, so that each request to the server behind it takes that much longer to be answered — a network's
round-trip time, which the sandbox's loopback (tens of microseconds) does not have. What the server sends back is
passed on at once. Bytes keep their order, and a request sent while another is held is held for the same time, not
after it (a line, not a queue): a client that sends many requests at once pays the delay once, one that waits for
each answer before the next request pays it every time.

    with DelayLine("127.0.0.1", 1094, rtt_s=0.001) as port:
        ... read root://127.0.0.1:<port>//path ...

It runs as a process of its own (this file run as a script), as a network would: not in the measured process, whose
time it would otherwise share. It ends when its standard input does: when the context ends, or when the process that
started it ends in any way (killed too).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys


class DelayLine:
    """A proxy on 127.0.0.1 (port: what entering the context returns) to HOST:PORT, adding RTT_S to every round trip,
    until the context ends."""

    def __init__(self, host: str, port: int, rtt_s: float):
        self.argv = [sys.executable, __file__, host, str(port), str(rtt_s)]
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> int:
        self._process = subprocess.Popen(self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the delay line did not start (exit {self._process.wait()})")
        return int(line)

    def __exit__(self, *exc) -> None:
        self._process.stdin.close()  # (its end)
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process.stdout.close()


class _Line:
    """The proxy itself (in the delay line's process)."""

    def __init__(self, host: str, port: int, rtt_s: float):
        self.host, self.port, self.rtt_s = host, port, rtt_s

    async def run(self) -> None:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.buffer.read)  # (serving meanwhile)
        server.close()

    async def _serve(self, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter) -> None:
        try:
            server_in, server_out = await asyncio.open_connection(self.host, self.port)
        except OSError:
            client_out.close()
            return
        held: asyncio.Queue = asyncio.Queue()
        tasks = [
            asyncio.ensure_future(self._hold(client_in, held)),
            asyncio.ensure_future(self._release(held, server_out)),
            asyncio.ensure_future(self._pass(server_in, client_out)),
        ]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            client_out.close()
            server_out.close()

    async def _hold(self, reader: asyncio.StreamReader, held: asyncio.Queue) -> None:
        """What the client sends, each piece with the time it may go on; an empty piece for its end."""
        loop = asyncio.get_running_loop()
        while data := await reader.read(1 << 16):
            held.put_nowait((loop.time() + self.rtt_s, data))
        held.put_nowait((loop.time() + self.rtt_s, b""))

    async def _release(self, held: asyncio.Queue, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due, data = await held.get()
            await asyncio.sleep(max(0.0, due - loop.time()))
            if not data:
                return
            writer.write(data)
            await writer.drain()

    async def _pass(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()


if __name__ == "__main__":
    asyncio.run(_Line(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])).run())
