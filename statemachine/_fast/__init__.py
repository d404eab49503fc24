"""The fenced room: every shortcut past attrs', pydantic's or CPython's own paths.

Each one makes exactly what the long way makes, faster; each is pinned by an equivalence
test in ``tests/test_fast_paths.py`` (which also checks the long way is taken whenever
the shortcut could differ). The domain modules call these; nothing here knows a domain
rule.

- ``_pydantic._trusted``: a pydantic model made as ``model_construct`` makes it, without
  validating or filling defaults (``test_trusted_makes_what_model_construct_makes``).
- ``_attrs._built`` / ``_attrs._builder``: the next phase built slot by slot by a function
  generated once per class, as its attrs ``__init__`` builds it
  (``test_next_builds_every_library_phase_as_its_init_does``, ``test_copy_is_attrs_evolve``
  and the user-subclass cases); a class whose ``__init__`` does more is built by it. The
  slots are set with plain stores on ``_unfrozen``'s twin of the class, made the class
  by ``__class__`` assignment (``tests/test_fast_builders.py``, against the builder that
  calls each slot's ``__set__``, which classes whose deriving could run code keep).
- ``_messages._asking`` / ``_system`` / ``_told``: the conversation's messages made as
  pydantic would make them
  (``test_the_messages_of_a_tool_call_are_the_models_pydantic_would_make``).
- ``_messages._appended``: a transcript grown by ``Transcript.appended``, which shares the
  messages already there (``test_a_transcript_grows_as_unpacking_it_would_make_it``,
  ``test_a_transcript_reads_as_the_tuple_of_its_messages`` and the branch and thread
  cases beside them).
- ``_messages._result_text``: a tool's result written by the C JSON encoder when that is
  provably the same text as ``_json.dumps`` (the ``written(...)`` cases); a dict of plain
  JSON (``_canonical._plain_json``: exact text, bools, None, bounded ints) by the encoder
  itself, without ``dumps_fast``'s checks (``tests/test_fast_canonical.py``).
- ``_deadline._within`` / ``_until``: a call under a deadline within the asyncio backend's
  own cancel scope, its deadline served by one timer per event loop (pinned against
  ``anyio.CancelScope(deadline=...)`` in ``tests/test_fast_calls.py``, which also pins the
  call path's other shortcuts: a tool's call built by its slots, the governor's record
  made once, a reply queued in one copy, an answered call's spend in one step).
- ``_canonical._plain_canonical``: a call's canonical arguments (what ``args_hash``
  hashes) written from the validated model's own values when its class's pydantic schema
  is on an allow-list and each value is of its field's exact type, instead of dumping it
  (``tests/test_fast_canonical.py``: generated classes and values against the plain path).
- ``_classes._per_class``: what a class answers once (a phase class's successors), kept
  by the class's id with a weak reference checked, instead of a ``WeakKeyDictionary``
  (``test_successors_are_read_once_per_class_and_not_kept_past_it`` in
  ``tests/test_fast_calls.py``, which also pins ``_batch._take_reply``: a reply's first
  call taken without the queued copy of ``Planning`` when nothing could tell).
"""
