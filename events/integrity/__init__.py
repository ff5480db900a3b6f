"""Tamper evidence: each stream's hash chain, signed checkpoints over the whole log, their
high-water mark, and the snapshot check.

* :mod:`events.integrity.anchor_audit` — Checking the log against its checkpoints (see
  :mod:`events.integrity.anchors`), naming what differs.
* :mod:`events.integrity.anchor_reading` — What the anchor check reads: checkpoints, and how the
  log stands against them, for the whole log or for one stream (``stream_id``; None: every
  stream).
* :mod:`events.integrity.anchor_witness` — The checkpoint high-water mark: the newest checkpoint
  known to exist, kept outside the database.
* :mod:`events.integrity.anchors` — Whole-log tamper evidence: a chain of signed checkpoints
  over the log, off the append path.
* :mod:`events.integrity.chain` — Auditing a stream's hash chain: recompute every hash and name
  the first bad event.
* :mod:`events.integrity.snapshot_audit` — Checking a stored snapshot against the log: it must
  be its saga's fold up to its version.
"""
