"""What every bench worker process does first: connect, set up the streams, bind its durable pull
consumer, and stop on SIGINT/SIGTERM or after ``max_s`` (baseline A, the floor, the fair peer)."""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass

import nats
from nats.aio.client import Client
from nats.js import JetStreamContext

from consumers.settings import Settings
from consumers.streams import ensure_streams
from schemas.subjects import Subjects


@dataclass
class WorkerLink:
    settings: Settings
    subjects: Subjects
    nc: Client
    js: JetStreamContext
    psub: JetStreamContext.PullSubscription
    stop: asyncio.Event  # set by a signal or when ``max_s`` has passed


async def open_worker(settings: Settings, max_s: float) -> WorkerLink:
    """Connect to ``settings.nats_url`` and bind ``settings.consumer_name`` on the inbound stream."""
    subjects = Subjects(settings.prefix)
    nc = await nats.connect(settings.nats_url)
    js = nc.jetstream()
    await ensure_streams(js, settings, subjects)
    psub = await js.pull_subscribe_bind(durable=settings.consumer_name, stream=subjects.inbound_stream)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loop.call_later(max_s, stop.set)
    return WorkerLink(settings, subjects, nc, js, psub, stop)
