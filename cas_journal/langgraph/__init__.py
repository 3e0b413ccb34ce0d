"""A LangGraph checkpointer on a cas-journal store: ``CasJournalSaver(journal)``.

    import cas_journal as cj
    from cas_journal.langgraph import CasJournalSaver

    graph = builder.compile(checkpointer=CasJournalSaver(cj.Journal.open("store")))

Needs the ``[langgraph]`` extra. Every channel value is stored by content: a list (the
messages) element by element, so consecutive checkpoints and copied threads share every
unchanged element; a checkpoint costs its new values plus one small record. Each
(thread, checkpoint namespace) is one ref under ``langgraph/``, so ``copy_thread`` is a
ref copy and pack, gc, fsck and sync treat LangGraph threads like journal threads.

Modules: ``records`` (the record format, pure), ``history`` (refs, cached reads, chain
indexes, commits), ``values`` (serializing and storing values), ``saver`` (the
``BaseCheckpointSaver`` implementation).
"""

from .saver import CasJournalSaver

__all__ = ["CasJournalSaver"]
