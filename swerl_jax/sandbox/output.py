"""What the host keeps of a sandboxed command's output: its head and tail, and how much was cut between them."""

from __future__ import annotations


class BoundedOutput:
    """A stream's first and last `limit // 2` bytes and its length: what the host keeps of a command's output."""

    def __init__(self, limit: int):
        self.half, self.head, self.tail, self.total = max(1, limit // 2), bytearray(), bytearray(), 0

    def add(self, chunk: bytes) -> None:
        """Count `chunk`; keep it while the head has room, else in the tail."""
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > 2 * self.half:  # trim now and then, not per chunk
                del self.tail[:-self.half]

    def text(self) -> str:
        """The kept output as text, with a note of how many bytes were cut between head and tail."""
        tail = bytes(self.tail[-self.half:])
        if self.total <= len(self.head) + len(tail):
            return bytes(self.head + tail).decode("utf-8", errors="replace")
        cut = self.total - len(self.head) - len(tail)
        return (self.head.decode("utf-8", errors="replace") + f"\n[... {cut} bytes of output cut ...]\n"
                + tail.decode("utf-8", errors="replace"))
