# SPDX-License-Identifier: Apache-2.0
"""asyncio flavour: thin wrappers that run the blocking SDK in a thread
(asyncio.to_thread), so an event loop is never blocked. Every method of the
wrapped object becomes a coroutine; iterators (events, output, exec_stream)
become async iterators; Sandbox, Process, Files, Snapshot and the client's
namespaces come back wrapped too. No extra concurrency is gained beyond
threads: each call holds one thread while it waits.

    sb = await AsyncSandbox.create(template="minimal")
    async with sb:
        r = await sb.exec(["echo", "hi"])
        async for ev in await sb.client.events(follow=True): ...
"""
import asyncio
import inspect

from .client import Client, EventStream, Pools, Secrets, Snapshot, Snapshots, Tenants, Tokens
from .files import Files
from .process import OutputStream, Process, Pty
from .sandbox import Sandbox

_WRAPPED = (Client, Sandbox, Process, Files, Snapshot, Snapshots, Secrets, Tokens, Tenants, Pools, Pty)
_ITERATORS = (EventStream, OutputStream)


def _wrap(value):
    if isinstance(value, _ITERATORS):
        return AsyncIterator(value)
    if isinstance(value, _WRAPPED):
        return AsyncProxy(value)
    if isinstance(value, list) and value and isinstance(value[0], _WRAPPED):
        return [AsyncProxy(v) for v in value]
    return value


class AsyncIterator:
    """An SDK iterator read in a thread, one item at a time."""

    def __init__(self, it):
        self.sync = it

    def __aiter__(self):
        return self

    async def __anext__(self):
        sentinel = object()
        item = await asyncio.to_thread(next, self.sync, sentinel)
        if item is sentinel:
            raise StopAsyncIteration
        return item

    async def close(self):
        await asyncio.to_thread(self.sync.close)

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.close()

    def __getattr__(self, name):
        return getattr(self.sync, name)


class AsyncProxy:
    """An SDK object whose methods are coroutines (run in a thread)."""

    def __init__(self, obj):
        self.sync = obj

    def __getattr__(self, name):
        attr = getattr(self.sync, name)
        if inspect.ismethod(attr):
            async def call(*args, **kwargs):
                return _wrap(await asyncio.to_thread(attr, *args, **kwargs))
            call.__name__ = name
            call.__doc__ = attr.__doc__
            return call
        return _wrap(attr)

    def __repr__(self):
        return f"Async{self.sync!r}"

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        if isinstance(self.sync, Sandbox):
            await asyncio.to_thread(self.sync.delete)
        elif isinstance(self.sync, Pty):
            await asyncio.to_thread(self.sync.close)


class AsyncSandbox:
    """Async constructors of sandboxes (AsyncProxy objects)."""

    @staticmethod
    async def create(**kw):
        return AsyncProxy(await asyncio.to_thread(Sandbox.create, **kw))

    @staticmethod
    async def get(sandbox_id, client=None):
        return AsyncProxy(await asyncio.to_thread(Sandbox.get, sandbox_id, client=client))

    @staticmethod
    async def connect(sandbox_id, client=None):
        return AsyncProxy(await asyncio.to_thread(Sandbox.connect, sandbox_id, client=client))

    @staticmethod
    async def list(**kw):
        return [AsyncProxy(s) for s in await asyncio.to_thread(Sandbox.list, **kw)]


def AsyncClient(*args, **kwargs):
    """A Client whose methods are coroutines."""
    return AsyncProxy(Client(*args, **kwargs))
