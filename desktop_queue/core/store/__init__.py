"""The JSON task store: the default :class:`~desktop_queue.core.backend.Backend`, in ``<data dir>/store/``.

- :mod:`.journal`: :class:`Store`, the journal of checksummed records, group commit,
  catch-up between processes, fail-stop, rotation (the layout is described there);
- :mod:`.codec`: how records, segment names and headers are spelled, and reading a segment;
- :mod:`.state`: :class:`StoreState`, the jobs in memory and their indexes;
- :mod:`.snapshot` and :mod:`.migrations`: snapshots and older schema versions;
- :mod:`.compaction`: folding segments into snapshots, archiving, purging (also run as
  ``python -m desktop_queue.core.store.compaction``);
- :mod:`.archive`: finished jobs outside the hot set, and their derived index;
- :mod:`.groupsync`: one ``fdatasync`` shared by concurrent committers;
- :mod:`.fileio`: atomic writes, fsync of directories, locks.

The JSON files are the store of record; everything else (the archive's index) can be
deleted and is rebuilt from them.
"""
