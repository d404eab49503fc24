"""A static check for a phase used after a transition left it: ``python -m statemachine.lint``.

Python has no move semantics, so the runtime refuses a second transition from the same
phase object (:class:`PhaseReusedError`). This checker finds the same mistake before
the code runs, and more of it: any use of the old variable after a transition, also a
read such as ``x.ctx`` after ``await x.execute(rt)`` (the run has moved on; the new
phase holds the new conversation, spend and step)::

    python -m statemachine.lint agents/ my_agent.py

prints one ``file:line:col: message`` line per finding and exits 1 if there is any,
0 if there is none, and 2 (with a message on stderr) for a path that does not exist
or a file that does not parse.

The rule, within one function (or the module's top level), read top to bottom:

- A *transition* is a call ``x.m(...)`` where ``m`` is the name of a public method of
  a non-terminal phase that returns a phase (:data:`TRANSITIONS`, read from the
  annotations in ``statemachine._phases``: ``receive``, ``call_tool``, ``execute``,
  ``retry``, ``advance``, ...) and ``x`` is a plain variable, or an attribute of
  ``self`` (``self.state``), that holds a phase.
- A variable *holds a phase* when it is annotated with a phase class (a parameter or
  ``x: T = ...``; ``T`` is one of the nine phases, ``Phase``, ``Active``, a subscript
  or union of them, or a class in the same file that subclasses one); when it is
  assigned the result of a transition, of a phase class's constructor, of
  ``agent.start(ctx, text)`` (a ``.start`` call with two arguments) or a variable
  that holds a phase; when it is checked with ``isinstance(x, <phase class>)`` or
  matched against a phase class pattern; and ``self`` in a method of a class in the
  same file that subclasses a phase. ``self.a`` holds a phase, unleft, at the start
  of every method of a class that annotates ``a`` with a phase class (in its body or
  as ``self.a: T``) or assigns it a phase in one of its methods.
- Aliases: after ``b = a`` (or ``b := a``, ``self.a = a``) both names hold the same
  phase object: a transition through either leaves both. Binding one anew ends it.
- Calls of the file's own functions, by name: a module-level function, a method of
  the same class (``self.m(...)``) and a nested ``def`` or a ``lambda`` assigned to a
  name are summarised first (to a fixed point: a helper that calls one counts). A
  call transitions the argument passed (by position or keyword, a variable or
  ``self.a``) for each parameter the function transitions, and each captured
  variable (for a method: ``self`` and ``self.a``) it transitions. A call of one that
  reads or transitions a captured phase already left is a finding at the call, so a
  closure that transitions ``p`` is reported at its second call. A captured name it
  reassigns (``nonlocal``, ``self.a = ...``) holds a new phase after the call.
- After a transition on ``x`` the variable is *left*; reading it again is a finding,
  until ``x`` is bound anew (``state = await state.advance(rt)`` rebinds it, which
  is the normal pattern). The arguments of the transition itself are read before the
  phase is left, so ``planning.call_tool(planning.agent.tools.call(...))`` is fine.
- Branches: a variable left in one branch of an ``if``/``match``/``try`` that falls
  through is left after it; a branch that ends in ``return``, ``raise``, ``break``
  or ``continue`` does not fall through. Loops are read twice, the second time with
  what the first left, so a transition in a loop body on a variable the loop does
  not rebind is found on its second pass (``for c in calls: planning.call_tool(c)``);
  only such a finding says "in an earlier pass of the loop". A transition inside a
  comprehension on a variable the comprehension does not bind runs once per item,
  and is a finding too.

Limits (what the checker does not see): it has no types, so a phase reached through
another object's attribute, a container, a function's return value or another
module's subclass is not tracked unless annotated; a function passed as a value (a
callback), another object's method or another module's function is not followed; a
function that transitions a parameter on some paths counts as doing it at every
call. The runtime's single-use check still catches every second transition that
gets past it. A deliberate read of a left phase (the runner logs the phase it came
from) is accepted with ``# statemachine: allow-reuse`` on its line.
"""

from __future__ import annotations

from ._command import check_paths, main
from ._facts import Finding
from ._file import check_source
from ._vocabulary import PHASE_CLASSES, TRANSITIONS

__all__ = ["PHASE_CLASSES", "TRANSITIONS", "Finding", "check_paths", "check_source", "main"]
