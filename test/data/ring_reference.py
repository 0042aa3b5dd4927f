"""The ring buffer the test oracles walk: one done flag per written slot, and the write seam.

Shared by ``sequence_reference`` and ``tape_reference``; like them, it shares no code with the
package.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Ring:
    """A 1-D ring buffer as a sample unit sees it: flags per written slot and the seam."""

    done: list[bool]  # one flag per written slot (len == written)
    full: bool
    newest: int  # slot written last

    @property
    def written(self) -> int:
        return len(self.done)

    @property
    def oldest(self) -> int:
        return (self.newest + 1) % self.written if self.full else 0
