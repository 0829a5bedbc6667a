"""Known journal tails: when a cold reopen may skip reading the journal past its checkpoint.

A session restored from its last checkpoint reads the journal rows past the snapshot (a crash
between a journal write and its checkpoint loses nothing). When this process unloads a session
whose engine was exactly its journal, it keeps a ``KnownTail``: the generation, the journal's
``next_seq`` and the subject sequence of the last checkpoint, whose snapshot has that same
``next_seq``. The next reopen here that fetches that very checkpoint (same sequence, generation
and ``next_seq``), while the session's partition is still held at the same epoch, knows the rows
past the snapshot are none, and does not read them. Anything else reads, as before.

Why nothing can have been written meanwhile, case by case:

- this process: only an engine session appends journal rows, and only the runner that opened the
  session last (``opened`` gives each open a ticket) keeps a tail; any other unload drops it, a
  reopen consumes it, and a session whose append ever raised or was cancelled (it may still have
  committed: a cancelled caller's write still runs in the group commit, an answer to ``COMMIT``
  may be lost) is never trusted again in this process (``unsure``);
- another process: it must own the session's partition first. Losing or handing over a partition
  drops its tails (``forget``), a lost prefix lease drops them all, and a tail is trusted only at
  the partition epoch it was kept at (an epoch is the lease revision at which a process took the
  partition, unchanged across its renewals: a different epoch means it changed hands meanwhile);
- deletion bumps the generation (a tail is of one generation); clearing a session's history
  (``memory.clear``, deletion) drops its tail; start-up's ``clear_stale`` runs before any tail exists.

Nothing here does I/O. Memory: one dict entry of four ints per unloaded session, at most
``MAX_KNOWN_TAILS`` (the oldest go first: forgetting costs a reopen its read, nothing else).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from typing import NamedTuple

log = logging.getLogger(__name__)

MAX_KNOWN_TAILS = 100_000  # unloaded sessions with a tail kept (~150 bytes each)
MAX_UNSURE = 10_000  # sessions distrusted for an uncertain append; past it, no tail is kept any more


class KnownTail(NamedTuple):
    """What a reopen must find for the journal past the checkpoint to be known empty."""

    generation: int
    next_seq: int  # rows of the generation: seq 0 .. next_seq - 1, all folded into the checkpoint
    checkpoint_seq: int  # the checkpoint's subject sequence in the checkpoint stream
    epoch: int  # the session's partition epoch when kept (0: not partitioned)


class KnownTails:
    """The tails kept for unloaded sessions. ``epoch_of`` answers the epoch at which this process
    holds a session's partition now (0 when not partitioned; None: not held)."""

    def __init__(
        self, epoch_of: Callable[[str], int | None], *, cap: int = MAX_KNOWN_TAILS, max_unsure: int = MAX_UNSURE
    ) -> None:
        self._epoch_of = epoch_of
        self._cap = cap
        self._max_unsure = max_unsure
        self._tails: dict[str, KnownTail] = {}
        self._latest: dict[str, int] = {}  # session id → ticket of its latest open (loaded sessions)
        self._tickets = itertools.count(1)
        self._unsure: set[str] = set()
        self.keeping = True

    def __len__(self) -> int:
        return len(self._tails)

    def opened(self, session_id: str) -> int:
        """A runner opens ``session_id``'s engine: its ticket (hand it to ``unloaded``)."""
        ticket = next(self._tickets)
        self._latest[session_id] = ticket
        self._tails.pop(session_id, None)
        return ticket

    def take(self, session_id: str, generation: int) -> KnownTail | None:
        """The tail kept for a reopen of ``generation`` (consumed), when it may be trusted now."""
        tail = self._tails.pop(session_id, None)
        if tail is None or tail.generation != generation or session_id in self._unsure:
            return None
        if self._epoch_of(session_id) != tail.epoch:
            return None
        return tail

    def unloaded(self, session_id: str, ticket: int, exact: tuple[int, int, int] | None) -> None:
        """The runner holding ``ticket`` unloads ``session_id``. ``exact``: (generation, next_seq,
        checkpoint_seq) when its engine was exactly the journal and the checkpoint; None drops any tail."""
        latest = self._latest.get(session_id) == ticket
        if latest:
            del self._latest[session_id]
        self._tails.pop(session_id, None)
        if exact is None or not latest or not self.keeping or session_id in self._unsure:
            return
        epoch = self._epoch_of(session_id)
        if epoch is None:
            return  # its partition is not ours (being handed over)
        self._tails[session_id] = KnownTail(exact[0], exact[1], exact[2], epoch)
        if len(self._tails) > self._cap:
            del self._tails[next(iter(self._tails))]

    def unsure(self, session_id: str) -> None:
        """An append of ``session_id`` raised or was cancelled: it may have committed; never trust a tail of it."""
        self._tails.pop(session_id, None)
        if not self.keeping:
            return
        self._unsure.add(session_id)
        if len(self._unsure) > self._max_unsure:
            log.warning("%d sessions had an uncertain journal append; reopens read the journal from now on",
                        len(self._unsure))
            self.keeping = False
            self._tails.clear()
            self._unsure.clear()

    def drop(self, session_id: str) -> None:
        """Forget ``session_id``'s tail (its history was cleared, or it unloads in doubt)."""
        self._tails.pop(session_id, None)

    def forget(self, moved: Callable[[str], bool]) -> None:
        """Sessions another process may own now (a lost or handed-over partition)."""
        for session_id in [sid for sid in self._tails if moved(sid)]:
            del self._tails[session_id]

    def forget_all(self) -> None:
        """Ownership lost or in doubt for everything (the prefix lease)."""
        self._tails.clear()
