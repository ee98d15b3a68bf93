"""One question to the operator on the terminal, answered within a timeout.

Why not ``input()`` in a thread: a timeout or a forced stop would leave the thread
blocked on the terminal. A reader on the file descriptor ends with the question. Used
by the human judge (perception/judge.py) and the session's prompts below (between trials,
after a stop holding the block, a refused release).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import TextIO, TypeVar

from mecharm.runtime.threads import to_thread

__all__ = ["ask_block_removed", "ask_release", "ask_terminal", "ask_yes", "release_prompt"]

T = TypeVar("T")


async def ask_terminal(
    prompt: str,
    answers: Mapping[str, T],
    retry: str,
    timeout_s: float,
    in_fd: int | None = None,
    out: TextIO | None = None,
) -> tuple[T | None, str]:
    """Write ``prompt``, read lines until one is a key of ``answers`` (case and spaces
    ignored) or ``timeout_s`` passes. Returns (the answer's value, "") or (None, why not):
    no terminal, no answer in time, input closed. Any other line is asked again with
    ``please answer {retry} (got ...)``. ``in_fd`` None: the process's stdin."""
    out = out or sys.stdout
    loop = asyncio.get_running_loop()
    try:
        fd = in_fd if in_fd is not None else sys.stdin.fileno()
    except (OSError, ValueError) as exc:
        return None, f"no terminal to ask ({exc})"
    queue: asyncio.Queue[bytes] = asyncio.Queue()

    def readable() -> None:
        try:
            queue.put_nowait(os.read(fd, 1024))
        except OSError:
            queue.put_nowait(b"")

    out.write(prompt)
    out.flush()
    try:
        loop.add_reader(fd, readable)
    except (OSError, ValueError, NotImplementedError) as exc:
        out.write("\n")
        return None, f"no terminal to ask ({exc})"
    deadline = loop.time() + timeout_s
    buf = b""
    why = f"no answer within {timeout_s:.1f} s"
    try:
        while (remaining := deadline - loop.time()) > 0:
            try:
                async with asyncio.timeout(remaining):  # not wait_for (3.11 cancellation race)
                    data = await queue.get()
            except TimeoutError:
                break
            if not data:
                why = "terminal input closed"
                break
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                answer = line.decode("utf-8", "replace").strip().lower()
                if answer in answers:
                    return answers[answer], ""
                out.write(f"please answer {retry} (got {answer[:20]!r}): ")
                out.flush()
    finally:
        loop.remove_reader(fd)
    out.write("\n")
    return None, why


async def ask_yes(prompt: str = "next trial? [Y/n] ") -> bool:
    """Terminal confirmation between trials (EOF or 'n' = stop)."""
    answer = await to_thread(_input, prompt)
    return answer is not None and answer.strip().lower() in ("", "y", "yes")


async def ask_block_removed() -> bool:
    """After a stop holding the block (``--confirm``): the operator takes it out by hand and
    says so; only an explicit yes goes on (the next trial opens the gripper at HOME)."""
    answer = await to_thread(
        _input,
        "The block is still in the gripper. Take it out by hand; then go on (y) or stop (n)? "
        "[y/N] ",
    )
    return answer is not None and answer.strip().lower() in ("y", "yes")


def _input(prompt: str) -> str | None:
    with contextlib.suppress(EOFError):
        return input(prompt)
    return None


def release_prompt(
    timeout_s: float, in_fd: int | None = None, out: TextIO | None = None
) -> Callable[[str], Awaitable[bool | None]]:
    """The ``--confirm`` prompt of a refused release, bound to its timeout."""

    async def prompt(why: str) -> bool | None:
        return await ask_release(why, timeout_s, in_fd, out)

    return prompt


async def ask_release(
    why: str, timeout_s: float, in_fd: int | None = None, out: TextIO | None = None
) -> bool | None:
    """Ask on the terminal whether to open the gripper although the block was not confirmed
    above the box: True = release anyway, False = abort, None = no answer within
    ``timeout_s`` or no terminal (the caller aborts, holding the block)."""
    release, _why = await ask_terminal(
        f"RELEASE REFUSED: {why}.\nThe arm holds the block above the box. "
        f"Release anyway (r) or abort holding it (a)? [r/a] (within {timeout_s:.0f} s): ",
        {"r": True, "release": True, "a": False, "abort": False},
        "r (release) or a (abort)",
        timeout_s,
        in_fd,
        out,
    )
    return release
